"""The token ids vLLM will compute for a request, so the replica selector can hash its prefix.

What vLLM (0.32, ``vllm/renderers``) does, and we repeat:

- chat: messages become a *conversation*: text content parts are joined with ``"\\n"``,
  ``None`` content becomes ``""``, tool-call ``arguments`` JSON strings become objects;
  ``developer`` messages become ``system`` ones (merged into one first message) when the template
  never names that role. Tools are re-serialised by vLLM's pydantic model (``type``, then
  ``function`` with ``name``, ``description``, ``parameters``, and ``strict`` when set). The
  template kwargs are the request's ``chat_template_kwargs`` (only those the template reads)
  overridden by its ``add_generation_prompt`` (default true), ``continue_final_message``,
  ``documents`` and ``reasoning_effort`` (which also sets ``enable_thinking`` unless given).
  ``transformers``' ``apply_chat_template`` renders the text and tokenizes it with
  ``add_special_tokens`` from the request (default false: the template writes them).
- completions: a string prompt is tokenized with special tokens (vLLM's default for
  completions: ``tokenizer.json``'s post-processor adds a BOS where the model has one); a list
  of token ids is used as is.

The transformers part is :class:`gateway.local.hf_tokenizer.HfTokenizer`, which reads the checkpoint
with ``tokenizers`` and ``jinja2`` only: the gateway never imports ``transformers`` (nor torch).

Anything we cannot reproduce (images and other non-text parts, a batch of several prompts,
kwargs that truncate or pad, a template that raises) yields ``None``: the selector then scores on
load alone, as it does until the tokenizer is loaded (:meth:`PromptTokenizer.load_in_background`,
never on the request path). Also unreproduced: the server's ``--default-chat-template-kwargs``
and templates that loop over content parts (vLLM then passes parts, we pass text): their ids
differ, so their blocks simply do not match (never a wrong match). Tokenizing a few thousand
tokens costs about a millisecond of CPU: :meth:`PromptTokenizer.atoken_ids` runs it on a worker
thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gateway.local.hf_tokenizer import HfTokenizer

log = logging.getLogger(__name__)

#: ``apply_chat_template`` parameters vLLM accepts in ``chat_template_kwargs`` that act on the
#: tokenization, or clash with what it passes itself: not reproduced.
UNREPRODUCED_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "chat_template",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


class PromptTokenizer:
    """Prompt token ids from the served model's checkpoint directory (``tokenizer.json``,
    ``tokenizer_config.json``, optionally ``chat_template.jinja``).

    Built unloaded; :meth:`load` loads at once (blocking), :meth:`load_in_background` on a worker
    thread. Until loaded (and while loading failed) every ``*token_ids`` method answers ``None``.
    """

    def __init__(self, model_dir: str | Path) -> None:
        self.model_dir = Path(model_dir)
        self.error: str | None = None  # why the last load failed
        self._hf: HfTokenizer | None = None
        self._loader: threading.Thread | None = None

    @classmethod
    def load(cls, model_dir: str | Path) -> PromptTokenizer:
        """Loaded now (blocking: call off the event loop); raises on missing or invalid files."""
        tokenizer = cls(model_dir)
        tokenizer._hf = HfTokenizer.read(tokenizer.model_dir)
        return tokenizer

    def load_in_background(self) -> None:
        """Start loading on a worker thread (a no-op while loaded or loading); logs the outcome
        and how long it took."""
        if self._hf is not None or (self._loader is not None and self._loader.is_alive()):
            return
        self.error = None
        self._loader = threading.Thread(
            target=self._load_logged, name=f"tokenizer-load {self.model_dir.name}", daemon=True
        )
        self._loader.start()

    def _load_logged(self) -> None:
        start = time.perf_counter()
        try:
            hf = HfTokenizer.read(self.model_dir)
        except Exception as exc:  # tokenizers raises bare Exceptions: report it, stay unloaded
            self.error = f"{type(exc).__name__}: {exc}"
            log.error(
                "tokenizer %s did not load (cache-aware choice scores on load alone): %s",
                self.model_dir,
                self.error,
            )
            return
        self._hf = hf
        log.info("tokenizer %s loaded in %.3f s", self.model_dir, time.perf_counter() - start)

    @property
    def loaded(self) -> bool:
        return self._hf is not None

    @property
    def failed(self) -> bool:
        return self.error is not None

    def wait(self, timeout_s: float | None = None) -> bool:
        """Whether it is loaded, after waiting up to ``timeout_s`` for a background load
        (blocking: for tests and command lines)."""
        if self._loader is not None:
            self._loader.join(timeout_s)
        return self.loaded

    async def await_load(self, timeout_s: float | None = None) -> bool:
        """:meth:`wait` off the event loop (at once when no load is under way)."""
        if self._loader is None or not self._loader.is_alive():
            return self.loaded
        return await asyncio.to_thread(self.wait, timeout_s)

    def token_ids(self, endpoint: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Prompt token ids of an OpenAI ``chat.completions`` or ``completions`` body."""
        if endpoint == "chat.completions":
            return self.chat_token_ids(body)
        if endpoint == "completions":
            return self.completion_token_ids(body)
        return None

    async def atoken_ids(self, endpoint: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        """:meth:`token_ids` on a worker thread (inline while not loaded: then it only passes
        a prompt of token ids through, which needs no tokenizer)."""
        if self._hf is None:
            return self.token_ids(endpoint, body)
        return await asyncio.to_thread(self.token_ids, endpoint, body)

    def chat_token_ids(self, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        hf = self._hf
        messages = body.get("messages")
        if hf is None or not isinstance(messages, list) or not messages:
            return None
        conversation: list[dict[str, Any]] = []
        for message in messages:
            parsed = _conversation_message(message)
            if parsed is None:
                return None
            conversation.append(parsed)
        try:
            tools = _vllm_tools(body.get("tools"))
        except ValueError:
            return None
        template = hf.template_for(tools)
        if template is None:
            return None
        if not template.names_developer:
            conversation = _developer_as_system(conversation)
        kwargs = _template_kwargs(body, template.variables)
        if kwargs is None:
            return None
        try:
            text = hf.render(template, conversation, tools=tools, **kwargs)
        except (hf.template_error, TypeError, ValueError):
            return None  # vLLM answers these requests with an error of its own
        return tuple(hf.encode(text, bool(body.get("add_special_tokens", False))))

    def completion_token_ids(self, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            hf = self._hf
            special = bool(body.get("add_special_tokens", True))
            return None if hf is None else tuple(hf.encode(prompt, special))
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return tuple(prompt)
        if isinstance(prompt, list) and len(prompt) == 1:
            return self.completion_token_ids({**body, "prompt": prompt[0]})
        return None


def _template_kwargs(body: Mapping[str, Any], variables: frozenset[str]) -> dict[str, Any] | None:
    """vLLM's template kwargs for a chat body (``None`` if some would act beyond the template)."""
    requested = body.get("chat_template_kwargs") or {}
    if not isinstance(requested, Mapping) or UNREPRODUCED_KWARGS & requested.keys():
        return None
    kwargs = {k: v for k, v in requested.items() if k in variables or k == "documents"}
    kwargs["add_generation_prompt"] = bool(body.get("add_generation_prompt", True))
    kwargs["continue_final_message"] = bool(body.get("continue_final_message", False))
    if body.get("documents") is not None:
        kwargs["documents"] = body["documents"]
    effort = body.get("reasoning_effort")
    if effort is not None and effort != "auto":
        if "reasoning_effort" in variables:
            kwargs["reasoning_effort"] = effort
        if "enable_thinking" not in requested and "enable_thinking" in variables:
            kwargs["enable_thinking"] = effort != "none"
    return kwargs


def _vllm_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The tools as vLLM's model dumps them (``ValueError`` where vLLM would refuse them)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ValueError("tools is not a list")
    out: list[dict[str, Any]] = []
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            raise ValueError("a tool without a function name")
        if tool.get("type", "function") != "function":
            raise ValueError("a tool that is not a function")
        function = {k: fn.get(k) for k in ("name", "description", "parameters")}
        defer = fn.get("defer_loading")
        defer = tool.get("defer_loading") if defer is None else defer
        for key, value in (("strict", fn.get("strict")), ("defer_loading", defer)):
            if value is not None:
                function[key] = value
        dumped: dict[str, Any] = {"type": "function", "function": function}
        if tool.get("defer_loading") is not None:
            dumped["defer_loading"] = tool["defer_loading"]
        out.append(dumped)
    return out


def _developer_as_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM's fallback for templates without a developer role: developer messages become system
    ones, and system messages not alone at the front merge into one there."""
    if not any(m["role"] == "developer" for m in conversation):
        return conversation
    converted = [{**m, "role": "system"} if m["role"] == "developer" else m for m in conversation]
    systems = [i for i, m in enumerate(converted) if m["role"] == "system"]
    if systems in ([], [0]):
        return converted
    text = "\n\n".join(m["content"] for m in converted if m["role"] == "system" and m["content"])
    rest = [m for m in converted if m["role"] != "system"]
    return [{"role": "system", "content": text}, *rest]


def _text_of(content: Any) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts: list[str] = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                return None  # images, audio, files: vLLM adds placeholders we cannot know
            texts.append(str(part.get("text") or ""))
        return "\n".join(texts)
    return None


def _conversation_message(message: Any) -> dict[str, Any] | None:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        return None
    text = _text_of(message.get("content"))
    if text is None:
        return None
    out: dict[str, Any] = {"role": message["role"], "content": text}
    for key in ("name", "tool_call_id", "reasoning", "reasoning_content"):
        if message.get(key) is not None:
            out[key] = message[key]
    calls = message.get("tool_calls")
    if message["role"] == "assistant" and isinstance(calls, list) and calls:
        parsed: list[dict[str, Any]] = []
        for call in calls:
            if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
                return None
            function = dict(call["function"])
            args = function.get("arguments")
            if isinstance(args, str):
                try:
                    function["arguments"] = json.loads(args) if args else {}
                except json.JSONDecodeError:
                    return None
            parsed.append({**call, "function": function})
        out["tool_calls"] = parsed
    return out
