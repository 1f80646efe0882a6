"""Reasoning on the simulator's Responses endpoint, checked the way OpenAI checks it.

A request with ``reasoning`` (an ``effort`` other than ``none``) gets a ``reasoning`` output item
before its answer, with a one-line summary; when ``include`` asks for
``reasoning.encrypted_content`` (what ``store: false`` clients such as Codex CLI do), the item
also carries ``encrypted_content``: its reasoning text sealed with an HMAC, opaque to the client.
(The summary is the whole reasoning: no reasoning tokens are billed.)

What makes it a test of whoever sits between the client and the provider (the gateway): as on
OpenAI's API, a reasoning item sent back in ``input`` must be one the provider can resolve. Its
``encrypted_content`` must come back unchanged (else 400 ``invalid_encrypted_content``); one
without ``encrypted_content`` names a stored response by id, and this provider stores nothing
(OpenAI answers 404 ``Item with id ... not found``; here a 400 with that message). A gateway that
rewrites reasoning items, or sends another target's back to this one, fails here.

Written apart from the gateway's own reading (``gateway.doors.responses.request``), as
``thinking.py`` is for Anthropic's signatures: the simulator stands for the provider.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from typing import Any, Final

import orjson

from loadtests.frontier_sim.answers import BadRequest

_KEY: Final = b"switchyard-frontier-simulator-reasoning"  # seals and checks; no secret to keep
ENCRYPTED_INCLUDE: Final = "reasoning.encrypted_content"
SUMMARY: Final = "Read the request and the tools offered, then answered."


def reasoning_requested(body: dict[str, Any]) -> bool:
    """Whether the request asks the model to reason; :class:`BadRequest` for a malformed one."""
    value = body.get("reasoning")
    if value is None:
        return False
    if not isinstance(value, dict):
        raise BadRequest("reasoning must be an object", "reasoning")
    effort = value.get("effort", "medium")
    if effort not in (None, "none", "minimal", "low", "medium", "high", "xhigh"):
        raise BadRequest(f"Unsupported value: '{effort}' for reasoning.effort", "reasoning.effort")
    return effort not in (None, "none")


def encrypted_requested(body: dict[str, Any]) -> bool:
    include = body.get("include")
    return isinstance(include, list) and ENCRYPTED_INCLUDE in include


def seal(text: str) -> str:
    """``text`` sealed as ``encrypted_content`` (base64 of the text and its MAC)."""
    mac = hmac.new(_KEY, text.encode(), hashlib.sha256).hexdigest()
    return base64.b64encode(orjson.dumps({"t": text, "m": mac})).decode()


def _unsealed(content: str) -> str | None:
    try:
        sealed = orjson.loads(base64.b64decode(content, validate=True))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(sealed, dict) or not isinstance(sealed.get("t"), str):
        return None
    text = sealed["t"]
    mac = hmac.new(_KEY, text.encode(), hashlib.sha256).hexdigest()
    return text if hmac.compare_digest(str(sealed.get("m")), mac) else None


def check_input_items(items: list[dict[str, Any]]) -> None:
    """OpenAI's checks of the reasoning items a client sends back (module docstring)."""
    for i, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        content = item.get("encrypted_content")
        if content is None:
            raise BadRequest(
                f"Item with id '{item.get('id')}' not found. Items are not persisted when "
                "`store` is set to false. Try again with `store` set to true, or remove this "
                "item from your input.",
                f"input[{i}]",
            )
        if not isinstance(content, str) or _unsealed(content) is None:
            raise BadRequest(
                f"The encrypted content for item {item.get('id')} could not be verified.",
                f"input[{i}].encrypted_content",
            )


def reasoning_item(item_id: str, encrypted: bool) -> dict[str, Any]:
    """The reasoning output item of an answer (``encrypted``: with ``encrypted_content``)."""
    item: dict[str, Any] = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": SUMMARY}],
    }
    if encrypted:
        item["encrypted_content"] = seal(f"{item_id}: {SUMMARY}")
    return item
