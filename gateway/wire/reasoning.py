"""Reasoning items a provider cannot resolve, left out of a body passed through to OpenAI's
Responses API (the one reading of the Responses request the pass-through needs)."""

from __future__ import annotations

from typing import Any


def reconcile_reasoning(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``body`` (the client's, not changed) or a copy OpenAI will accept, and notes on what
    changed, for a pass-through to OpenAI's Responses API: reasoning items of ``input`` that
    carry no ``encrypted_content`` are left out. Such an item came from another target (the
    local model's reasoning text, rendered by this door) or names a stored response by id; OpenAI
    refuses the first kind (it cannot look the id up), and the second only adds context."""
    items = body.get("input")
    if not isinstance(items, list):
        return body, {}
    kept = [
        item
        for item in items
        if not (
            isinstance(item, dict)
            and item.get("type") == "reasoning"
            and not item.get("encrypted_content")
        )
    ]
    if len(kept) == len(items):
        return body, {}
    dropped = len(items) - len(kept)
    note = f"{dropped} reasoning item(s) without encrypted_content left out"
    return {**body, "input": kept}, {"reasoning_items_dropped": note}
