"""Extended thinking on the simulator's Messages endpoint, checked the way Anthropic checks it.

A request with ``thinking: {"type": "enabled", "budget_tokens": N}`` (N >= 1024) or
``{"type": "adaptive"}`` gets a ``thinking`` block before its answer, carrying a ``signature``:
an HMAC of the thinking text. Streamed, the block is ``content_block_start`` (empty thinking and
signature), ``thinking_delta`` events, one ``signature_delta``, ``content_block_stop``.

What makes it a test of whoever sits between the client and the provider (the gateway): as on
Anthropic's API, thinking blocks that the client sends back in assistant turns must carry their
signature unchanged (else 400 ``Invalid `signature` in `thinking` block``), and with thinking
enabled, an assistant turn that made the tool calls the last user turn answers must start with its
thinking block (else 400, as Anthropic answers a client whose thinking blocks were dropped).
Thinking tokens are billed as output tokens.

These checks are written here, apart from the gateway's own reading of the same rules
(``gateway.wire.anthropic_thinking``), on purpose: the simulator stands for the provider, and a
gateway bug shared with its test's oracle would pass unseen.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterator
from typing import Any, Final

from loadtests.frontier_sim.answers import BadRequest, RequestView

MIN_BUDGET_TOKENS: Final = 1024
_KEY: Final = b"switchyard-frontier-simulator-thinking"  # signs and checks; no secret to keep
_EMPTY_BLOCK: Final = {"type": "thinking", "thinking": "", "signature": ""}


def sign(thinking: str) -> str:
    """The signature of a thinking text (base64, as Anthropic's look)."""
    digest = hmac.new(_KEY, thinking.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def thinking_requested(body: dict[str, Any]) -> bool:
    """Whether the request turns thinking on; raises :class:`BadRequest` for a malformed one."""
    value = body.get("thinking")
    if value is None:
        return False
    if not isinstance(value, dict):
        raise BadRequest("thinking: Input should be an object", "thinking")
    kind = value.get("type")
    if kind == "disabled":
        return False
    if kind == "adaptive":
        return True
    if kind != "enabled":
        raise BadRequest("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'")
    budget = value.get("budget_tokens")
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < MIN_BUDGET_TOKENS:
        raise BadRequest(
            f"thinking.enabled.budget_tokens: Input should be greater than or equal to "
            f"{MIN_BUDGET_TOKENS}"
        )
    return True


def check_replayed(messages: list[dict[str, Any]], enabled: bool) -> None:
    """Anthropic's checks of the thinking blocks a client sends back (module docstring)."""
    for i, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            if not isinstance(block, dict) or block.get("type") != "thinking":
                continue
            text, signature = block.get("thinking"), block.get("signature")
            if not isinstance(text, str) or not isinstance(signature, str):
                raise BadRequest(f"messages.{i}.content.{j}.thinking: Field required")
            if not hmac.compare_digest(signature, sign(text)):
                raise BadRequest(
                    f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                )
    if enabled:
        _check_tool_turn_starts_with_thinking(messages)


def _check_tool_turn_starts_with_thinking(messages: list[dict[str, Any]]) -> None:
    last = messages[-1]
    content = last.get("content")
    answers_tools = (
        last.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    )
    if not answers_tools:
        return
    for i in range(len(messages) - 2, -1, -1):
        turn = messages[i]
        if turn.get("role") != "assistant":
            continue
        blocks = turn.get("content")
        first = blocks[0] if isinstance(blocks, list) and blocks else None
        kind = first.get("type") if isinstance(first, dict) else "text"
        if kind not in ("thinking", "redacted_thinking"):
            raise BadRequest(
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{kind}`. When `thinking` is enabled, a final `assistant` message must "
                "start with a thinking block (preceeding the lastmost set of `tool_use` and "
                "`tool_result` blocks). We recommend you include thinking blocks from previous "
                "turns. To avoid this requirement, disable `thinking`."
            )
        return


def thinking_text(view: RequestView) -> str:
    """What the simulated model thinks before answering: deterministic given the request."""
    if view.tool_result is not None:
        return "The tool returned its result; I will use it to go on with the task."
    asked = " ".join(view.last_user_text.split()[:12])
    return f"The user asks: {asked}. I will answer briefly."


def block(text: str) -> dict[str, Any]:
    """The thinking block of an answer body."""
    return {"type": "thinking", "thinking": text, "signature": sign(text)}


def stream_events(text: str, index: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The events of a streamed thinking block at ``index``, as ``(event name, payload)``."""
    yield (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": index,
            "content_block": dict(_EMPTY_BLOCK),
        },
    )
    first, *rest = text.split(" ")
    for delta in (first, *(" " + word for word in rest)):  # a word a delta
        yield (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "thinking_delta", "thinking": delta},
            },
        )
    yield (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "signature_delta", "signature": sign(text)},
        },
    )
    yield "content_block_stop", {"type": "content_block_stop", "index": index}
