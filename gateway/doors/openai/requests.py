"""Validation of OpenAI request bodies (chat completions and legacy completions).

Known fields are type-checked the way OpenAI checks them (a bad one is a 400 naming the field);
unknown fields are kept and passed on, since back-ends such as vLLM take extra sampling
parameters. The body forwarded upstream is the client's own dict, not a re-dump of the model, so
nothing is lost or reordered.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gateway.errors import InvalidRequestError


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    type: str


class FunctionCall(_Open):
    name: str
    arguments: str


class ToolCall(_Open):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDef(_Open):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Open):
    type: str = "function"
    function: FunctionDef | None = None


class StreamOptions(_Open):
    include_usage: bool | None = None


class _Sampling(_Open):
    model: str = Field(min_length=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1, le=128)
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | int | None = None
    metadata: dict[str, str] | None = None


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)


PROMPT_SHAPES = (
    "a string, a non-empty list of strings, a non-empty list of token ids (integers from 0 "
    "to 2**31-1), or a non-empty list of such lists"
)


def _token(value: object) -> bool:
    return type(value) is int and 0 <= value < 2**31


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    suffix: str | None = None
    echo: bool | None = None
    best_of: int | None = Field(default=None, ge=1)

    @field_validator("prompt", mode="before")
    @classmethod
    def _prompt_shape(cls, value: object) -> object:
        # One clear message instead of one per union member; an empty list or a negative id
        # would otherwise reach litellm and fail deep inside its translation.
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            if all(isinstance(x, str) for x in value) or all(_token(x) for x in value):
                return value
            if all(isinstance(x, list) and x and all(_token(t) for t in x) for x in value):
                return value
        raise ValueError(f"'prompt' must be {PROMPT_SHAPES}")


def _raise_invalid(exc: ValidationError) -> None:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()))
    raise InvalidRequestError(
        f"Invalid value for '{loc}': {err.get('msg', 'invalid')}" if loc else err.get("msg", ""),
        param=loc or None,
        code="invalid_value" if loc else None,
    )


def validate_chat(body: dict[str, Any]) -> ChatCompletionRequest:
    try:
        req = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        _raise_invalid(exc)
        raise  # unreachable; keeps type checkers content
    if req.stream_options is not None and not req.stream:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    if isinstance(req.stop, list) and len(req.stop) > 4:
        raise InvalidRequestError("'stop' takes at most 4 sequences", param="stop")
    return req


def validate_completion(body: dict[str, Any]) -> CompletionRequest:
    try:
        req = CompletionRequest.model_validate(body)
    except ValidationError as exc:
        _raise_invalid(exc)
        raise
    if req.stream_options is not None and not req.stream:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            param="stream_options",
        )
    return req
