"""The token ids vLLM will compute for a request, so the replica selector can hash its prefix.

Loaded once at startup (:meth:`PromptTokenizer.load`, from the served model's checkpoint
directory: ``tokenizer.json`` + ``tokenizer_config.json`` with its chat template), never on the
request path.

What vLLM (0.32, ``vllm/renderers``) does, and we repeat:

- chat: messages become a *conversation*: text content parts are joined with ``"\\n"``,
  ``None`` content becomes ``""``, tool-call ``arguments`` JSON strings become objects; the chat
  template renders it with ``add_generation_prompt`` (default true), ``continue_final_message``,
  ``tools`` and ``chat_template_kwargs`` from the request; the text is tokenized with
  ``add_special_tokens`` from the request (default false for chat).
- completions: a string prompt is tokenized with special tokens (vLLM's default for
  completions); a list of token ids is used as is.

Anything we cannot reproduce (images and other non-text parts, a batch of several prompts)
yields ``None``: the selector then scores on load alone. A tool list is passed to the template as
the request gives it; vLLM passes its own parsed copy, whose JSON may differ in key order or
defaults, in which case blocks after the tools simply do not match (never a wrong match).
Tokenizing a few thousand tokens costs about a millisecond of CPU: :meth:`PromptTokenizer.
atoken_ids` runs it on a worker thread so the event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase


class PromptTokenizer:
    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self._tokenizer = tokenizer

    @classmethod
    def load(cls, model_dir: str | Path) -> PromptTokenizer:
        """The served model's tokenizer and chat template (blocking: call at startup)."""
        return cls(AutoTokenizer.from_pretrained(str(model_dir)))

    def token_ids(self, endpoint: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Prompt token ids of an OpenAI ``chat.completions`` or ``completions`` body."""
        if endpoint == "chat.completions":
            return self.chat_token_ids(body)
        if endpoint == "completions":
            return self.completion_token_ids(body)
        return None

    async def atoken_ids(self, endpoint: str, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        """:meth:`token_ids` on a worker thread."""
        return await asyncio.to_thread(self.token_ids, endpoint, body)

    def chat_token_ids(self, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        messages = body.get("messages")
        if not isinstance(messages, list):
            return None
        conversation: list[dict[str, Any]] = []
        for message in messages:
            parsed = _conversation_message(message)
            if parsed is None:
                return None
            conversation.append(parsed)
        kwargs: dict[str, Any] = dict(body.get("chat_template_kwargs") or {})
        kwargs["add_generation_prompt"] = bool(body.get("add_generation_prompt", True))
        kwargs["continue_final_message"] = bool(body.get("continue_final_message", False))
        tools = body.get("tools") or None
        text = self._tokenizer.apply_chat_template(
            conversation,  # type: ignore[arg-type]  # values are not all str (tool calls)
            tools=tools,
            tokenize=False,
            **kwargs,
        )
        if not isinstance(text, str):
            return None
        special = bool(body.get("add_special_tokens", False))
        return tuple(self._tokenizer.encode(text, add_special_tokens=special))

    def completion_token_ids(self, body: Mapping[str, Any]) -> tuple[int, ...] | None:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            special = bool(body.get("add_special_tokens", True))
            return tuple(self._tokenizer.encode(prompt, add_special_tokens=special))
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return tuple(prompt)
        if isinstance(prompt, list) and len(prompt) == 1:
            return self.completion_token_ids({**body, "prompt": prompt[0]})
        return None


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
