"""An agent policy backed by a local checkpoint: transformers ``generate`` on its chat template.

The prompt is the checkpoint's own chat template rendered with the tools and the generation
prompt (``rl_loop.modeling.Policy.encode_prompt``: what vLLM renders for the same request). The
answer is decoded keeping the tool tags (``serving.tokenizer`` registers ``<tool_call>`` and
``</tool_call>`` as non-special tokens for vLLM's hermes parser) and parsed the way Qwen3 and
hermes emit calls: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, any
number of them; the text outside the tags (``<think>`` blocks removed) is the content. A call
whose JSON does not parse is kept as the model wrote it (its name if one can be read, the raw
text as arguments), so the environment reports it ``invalid`` and the gate counts it; an
unclosed tag at the end (generation cut off) is read up to the end.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rl_loop.agent.episode import ContextExhausted, ToolCall
from rl_loop.agent.runner import AssistantMessage
from rl_loop.modeling import Policy, generate, load_policy
from serving.tokenizer import TOOL_CALL_END, TOOL_CALL_START

_CALL = re.compile(
    re.escape(TOOL_CALL_START) + r"(.*?)(?:" + re.escape(TOOL_CALL_END) + r"|\Z)", re.DOTALL
)
_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL)
_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')


def parse_tool_calls(text: str, id_prefix: str = "call") -> AssistantMessage:
    """The assistant turn in ``text`` (see the module docstring); call ids are
    ``<id_prefix>_<n>``."""
    visible = _THINK.sub("", text)
    calls: list[ToolCall] = []
    for n, match in enumerate(_CALL.finditer(visible)):
        body = match.group(1).strip()
        call_id = f"{id_prefix}_{n}"
        try:
            parsed = json.loads(body)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and isinstance(parsed.get("name"), str):
            raw = parsed.get("arguments", {})
            arguments = raw if isinstance(raw, str) else json.dumps(raw)
            calls.append(ToolCall(call_id, parsed["name"], arguments))
        else:
            name = _NAME.search(body)
            calls.append(ToolCall(call_id, name.group(1) if name else "", body))
    content = _CALL.sub("", visible).strip()
    return AssistantMessage(content, tuple(calls))


class CheckpointPolicy:
    """Plays an agent with a checkpoint's model (greedy unless ``temperature`` > 0)."""

    def __init__(
        self,
        policy: Policy,
        *,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.policy = policy
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.seed = seed
        config = getattr(policy.model, "config", None)
        self.context = int(getattr(config, "max_position_embeddings", 0) or 0) or None
        self._turns = 0

    @classmethod
    def from_checkpoint(
        cls, checkpoint_dir: Path, device: str = "cpu", **kwargs: Any
    ) -> CheckpointPolicy:
        return cls(load_policy(checkpoint_dir, device), **kwargs)

    def act(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AssistantMessage:
        _, ids = self.generate_turn(messages, tools)
        return parse_tool_calls(self.policy.decode(ids), id_prefix=f"call_{self._turns}")

    def generate_turn(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The prompt's token ids and the ids generated for this turn."""
        prompt = self.policy.encode_prompt(messages, tools)
        if self.context is not None and len(prompt) + self.max_new_tokens > self.context:
            raise ContextExhausted(
                f"{len(prompt)} prompt tokens + {self.max_new_tokens} new exceed {self.context}"
            )
        (ids,) = generate(
            self.policy,
            [prompt],
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            seed=self.seed + self._turns,
        )
        self._turns += 1
        return tuple(prompt), tuple(ids)
