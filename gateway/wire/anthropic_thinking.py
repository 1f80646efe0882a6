"""Thinking blocks a Messages request may carry that Anthropic would refuse, made acceptable.

Anthropic checks the thinking blocks a client sends back: each must carry the signature Anthropic
gave it, and with thinking on, the assistant turn whose tool calls the last user turn answers must
start with one ("a final `assistant` message must start with a thinking block ... To avoid this
requirement, disable `thinking`"). Through a routing gateway both can fail although the client
did nothing wrong:

- a turn another target answered (our local model, through the Messages door's renderer) carries
  thinking blocks without a signature: Anthropic cannot verify them, so they are left out (they
  are the client's record of that turn, not something Anthropic can use);
- the tool turn has no signed thinking block to start with (it was another target's, or the client
  dropped it: Claude Code strips signed thinking made under another model's name): thinking is
  turned off for this request, as Anthropic's error says to, with the ``clear_thinking_*`` context
  edits that need it. The next turn that starts fresh (a user message) thinks again.

Anything else (signed blocks, redacted thinking, every field the gateway does not know) goes as
the client sent it. The result says what changed, for the record's notes.
"""

from __future__ import annotations

from typing import Any, Final

_THINKING_KINDS: Final = frozenset(("thinking", "redacted_thinking"))


def reconcile_thinking(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``body`` (the client's, not changed) or a copy Anthropic will accept, and notes on what
    changed (empty when nothing did)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return body, {}
    notes: dict[str, str] = {}
    kept = _without_unsigned_thinking(messages)
    if kept is not messages:
        notes["thinking_unsigned_dropped"] = "thinking blocks without a signature left out"
    if _thinking_on(body) and not _tool_turn_starts_with_thinking(kept):
        notes["thinking_disabled"] = (
            "the tool turn this request answers has no signed thinking block"
        )
    if not notes:
        return body, notes
    out = {**body, "messages": kept}
    if "thinking_disabled" in notes:
        del out["thinking"]
        _drop_thinking_edits(out)
    return out, notes


def _unsigned(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "thinking"
        and not (isinstance(block.get("signature"), str) and block["signature"])
    )


def _without_unsigned_thinking(messages: list[Any]) -> list[Any]:
    """``messages`` itself when no assistant turn holds an unsigned thinking block; else a copy
    without them (a turn left empty is left out: Anthropic joins consecutive turns of a role)."""
    out: list[Any] | None = None  # the copy, from the first turn that changes
    for i, message in enumerate(messages):
        if not _holds_unsigned(message):
            if out is not None:
                out.append(message)
            continue
        if out is None:
            out = messages[:i]
        content = [b for b in message["content"] if not _unsigned(b)]
        if content:
            out.append({**message, "content": content})
    return messages if out is None else out


def _holds_unsigned(message: Any) -> bool:
    """Whether ``message`` is an assistant turn holding an unsigned thinking block
    (:func:`_unsigned`, written out here).

    Every request of a long agent session passes each turn here (Claude Code resends the whole
    history, ~200 turns): written out, the check takes about half the time of a generator with
    a call per block (docs/hot_path.md)."""
    if type(message) is not dict or message.get("role") != "assistant":
        return False
    content = message.get("content")
    if type(content) is not list:
        return False
    for block in content:
        if type(block) is dict and block.get("type") == "thinking":
            signature = block.get("signature")
            if not (type(signature) is str and signature):
                return True
    return False


def _thinking_on(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _tool_turn_starts_with_thinking(messages: list[Any]) -> bool:
    """False only when the last user turn answers tool calls and the assistant turn that made
    them does not start with a thinking block."""
    if not messages or not isinstance(messages[-1], dict):
        return True
    content = messages[-1].get("content")
    if messages[-1].get("role") != "user" or not isinstance(content, list):
        return True
    if not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return True
    for message in reversed(messages[:-1]):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        blocks = message.get("content")
        first = blocks[0] if isinstance(blocks, list) and blocks else None
        return isinstance(first, dict) and first.get("type") in _THINKING_KINDS
    return True


def _drop_thinking_edits(body: dict[str, Any]) -> None:
    management = body.get("context_management")
    if not isinstance(management, dict) or not isinstance(management.get("edits"), list):
        return
    edits = [
        e
        for e in management["edits"]
        if not (isinstance(e, dict) and str(e.get("type", "")).startswith("clear_thinking"))
    ]
    if len(edits) == len(management["edits"]):
        return
    if edits:
        body["context_management"] = {**management, "edits": edits}
    elif len(management) == 1:
        del body["context_management"]
    else:
        body["context_management"] = {k: v for k, v in management.items() if k != "edits"}
