"""What the gateway reads of the providers' own wire formats, wherever it meets them: the
usage of a native answer in OpenAI's shape (for the record and the budget), the HTTP status an
Anthropic error type stands for, and the chat-completions fields an OpenAI-format provider takes.
The doors translate whole requests and answers (``gateway.doors``); the back-ends, the relay and
the record need only these facts, so they live below both.
"""

from __future__ import annotations

from typing import Any, Final

from gateway.wire.blocks import token_count

# Anthropic's error types and the HTTP statuses they stand for (its "errors" page). Overloaded
# is Anthropic's 529; the gateway reads it as a 503 (retryable: the pipeline fails over) and
# answers both as overloaded.
ANTHROPIC_ERROR_STATUS: Final = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 503,
}


def usage_as_openai(usage: Any) -> dict[str, Any] | None:
    """Anthropic's usage in OpenAI's shape: its ``input_tokens`` excludes cache reads and writes,
    OpenAI's ``prompt_tokens`` counts every input token (reads under ``cached_tokens``)."""
    if not isinstance(usage, dict):
        return None
    read = token_count(usage.get("cache_read_input_tokens")) or 0
    written = token_count(usage.get("cache_creation_input_tokens")) or 0
    prompt = (token_count(usage.get("input_tokens")) or 0) + read + written
    completion = token_count(usage.get("output_tokens")) or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": read, "cache_creation_tokens": written},
    }


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses ``usage`` object in chat completions' shape (cached input tokens under
    ``prompt_tokens_details``, as OpenAI bills them)."""
    if not isinstance(usage, dict):
        return None
    prompt = token_count(usage.get("input_tokens")) or 0
    completion = token_count(usage.get("output_tokens")) or 0
    cached = token_count(_field(usage.get("input_tokens_details"), "cached_tokens")) or 0
    reasoning = token_count(_field(usage.get("output_tokens_details"), "reasoning_tokens")) or 0
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


# OpenAI's chat-completions request fields: what a translated body may carry to an OpenAI-format
# provider (a client's own OpenAI body is passed whole), and what litellm is handed.
OPENAI_CHAT_FIELDS = frozenset(
    (
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "n",
        "seed",
        "user",
        "presence_penalty",
        "frequency_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "reasoning_effort",
        "stream",
        "stream_options",
        "prompt_cache_key",
        "safety_identifier",
        "service_tier",
        "verbosity",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
    )
)
