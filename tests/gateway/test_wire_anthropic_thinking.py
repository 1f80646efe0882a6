"""Thinking blocks Anthropic would refuse, made acceptable (gateway.wire.anthropic_thinking)."""

from __future__ import annotations

from typing import Any

from gateway.wire.anthropic_thinking import reconcile_thinking

SIGNED: Any = {"type": "thinking", "thinking": "Read it first.", "signature": "c2ln"}
UNSIGNED: Any = {"type": "thinking", "thinking": "Read it first.", "signature": ""}
CALL: Any = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py"}}
RESULT: Any = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]}
ASK: Any = {"role": "user", "content": "Read a.py"}
ON: Any = {"type": "enabled", "budget_tokens": 2048}


def body(*assistant: Any, thinking: Any = ON, **extra: Any) -> dict[str, Any]:
    messages = [ASK, {"role": "assistant", "content": list(assistant)}, RESULT]
    return {"model": "m", "max_tokens": 4096, "messages": messages, "thinking": thinking, **extra}


def test_a_body_anthropic_accepts_is_sent_as_it_is() -> None:
    sent = body(SIGNED, CALL, context_management={"edits": [{"type": "clear_thinking_20251015"}]})
    out, notes = reconcile_thinking(sent)
    assert out is sent and notes == {}


def test_unsigned_thinking_is_left_out_and_signed_thinking_kept() -> None:
    earlier: Any = {"role": "assistant", "content": [UNSIGNED, {"type": "text", "text": "Hi"}]}
    only_unsigned: Any = {"role": "assistant", "content": [UNSIGNED]}
    sent = body(SIGNED, CALL)
    sent["messages"] = [ASK, earlier, only_unsigned, *sent["messages"][1:]]
    out, notes = reconcile_thinking(sent)
    assert out["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "Hi"}]}
    assert out["messages"][2] == {"role": "assistant", "content": [SIGNED, CALL]}  # empty: gone
    assert out["thinking"] == ON and set(notes) == {"thinking_unsigned_dropped"}
    assert sent["messages"][1]["content"][0] is UNSIGNED  # the client's body is not changed


def test_a_long_history_loses_only_its_unsigned_block() -> None:
    """Claude Code resends the whole session: the turns before the first unsigned block are
    kept as they are, and one unsigned block late in a long history is still found."""
    signed_turn: Any = {"role": "assistant", "content": [SIGNED, CALL]}
    history = [ASK] + [signed_turn, RESULT] * 100
    late: Any = {"role": "assistant", "content": [UNSIGNED, CALL]}
    sent = body(SIGNED, CALL)
    sent["messages"] = [*history, late, RESULT, *sent["messages"][1:]]
    out, notes = reconcile_thinking(sent)
    assert set(notes) == {"thinking_unsigned_dropped"}
    assert out["messages"][:201] == history and out["messages"][100] is history[100]
    assert out["messages"][201] == {"role": "assistant", "content": [CALL]}
    assert len(out["messages"]) == len(sent["messages"])


def test_a_tool_turn_without_signed_thinking_turns_thinking_off() -> None:
    edits: Any = [{"type": "clear_thinking_20251015", "keep": "all"}, {"type": "clear_tool_uses"}]
    sent = body(UNSIGNED, CALL, context_management={"edits": edits})
    out, notes = reconcile_thinking(sent)
    assert "thinking" not in out
    assert out["context_management"] == {"edits": [{"type": "clear_tool_uses"}]}
    assert out["messages"][1] == {"role": "assistant", "content": [CALL]}
    assert set(notes) == {"thinking_unsigned_dropped", "thinking_disabled"}
    alone, _ = reconcile_thinking(body(CALL, context_management={"edits": edits[:1]}))
    assert "thinking" not in alone and "context_management" not in alone


def test_thinking_stays_on_where_the_tool_turn_has_it_or_nothing_answers_tools() -> None:
    assert reconcile_thinking(body({"type": "redacted_thinking", "data": "x"}, CALL))[1] == {}
    fresh = body(CALL)
    fresh["messages"] = [*fresh["messages"], {"role": "assistant", "content": "ok"}, ASK]
    assert reconcile_thinking(fresh)[1] == {}  # a new user turn: no tool turn to continue
    assert reconcile_thinking(body(CALL, thinking={"type": "disabled"}))[1] == {}
