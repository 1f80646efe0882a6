"""The conversation pieces every exporter shares: chat messages, tool calls, answers, and the
error that says a recorded shape cannot be mapped (see :mod:`traffic.export.conversation`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

SKIP_REASONS = (
    "unknown_wire_format",
    "untranslated_legacy_record",
    "malformed_request",
    "malformed_response",
    "non_text_content",
    "unknown_role",
    "non_function_tool",
    "batched_prompt",
    "fim_suffix",
    "stateful_conversation",
    "legacy_function_call",
)


class UnsupportedShape(ValueError):
    """A recorded request or response that cannot be mapped faithfully; ``reason`` is a code from
    ``SKIP_REASONS`` suitable for counting."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(frozen=True)
class ToolCall:
    """A function call the assistant made; ``arguments`` is the JSON text the model produced."""

    id: str
    name: str
    arguments: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class AssistantTurn:
    """The answer of one inference: text (``None`` when it only called tools) and tool calls."""

    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()

    def to_message(self) -> Message:
        """The turn as an OpenAI chat assistant message (``tool_calls`` only when present)."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        return message
