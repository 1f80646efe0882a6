"""Traffic: search the record, open one exchange, open one episode.

Search filters are the store's own (:class:`traffic.store.InferenceFilter`: window, route
target, served model, API key, episode, feedback kind) plus a text contained in the request or
the answer; pages of ``console.page_size`` exchanges, newest first, with an "older" cursor.
An exchange shows the conversation as the served model saw it (the exporter's reading of the
record, :func:`traffic.export.conversation.conversation_of`), the raw bodies, the decision and its
reason, timings, tokens, cost, provider attempts, feedback and shadow answers.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response

from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.console.web import Ctx
from gateway.errors import InvalidRequestError, NotFoundError
from traffic.export.conversation import UnsupportedShape, conversation_of
from traffic.store import FEEDBACK_KINDS, InferenceFilter, InferenceRow
from traffic.store.console_queries import episode, exchange, search

FILTER_FIELDS = ("target", "model", "key", "feedback", "episode", "text")


def _filters(ctx: Ctx) -> tuple[InferenceFilter, dict[str, str]]:
    _, window, _ = ctx.window()
    given = {name: ctx.param(name) or "" for name in FILTER_FIELDS}
    feedback = given["feedback"] or None
    if feedback is not None and feedback not in (*FEEDBACK_KINDS, "any"):
        raise InvalidRequestError(f"feedback must be one of {[*FEEDBACK_KINDS, 'any']}")
    filters = InferenceFilter(
        since=window.since,
        until=window.until,
        route_target=given["target"] or None,
        served_model=given["model"] or None,
        api_key_id=given["key"] or None,
        episode_id=given["episode"] or None,
        has_feedback=feedback,  # type: ignore[arg-type]  # checked just above
    )
    return filters, given


async def search_page(ctx: Ctx) -> Response:
    window_name, _, _ = ctx.window()
    filters, given = _filters(ctx)
    before = ctx.param("before")
    try:
        page = await search(
            ctx.store,
            filters,
            text=given["text"] or None,
            before=before,
            limit=ctx.config.page_size,
        )
    except ValueError as exc:
        raise InvalidRequestError(str(exc)) from exc
    values: dict[str, Any] = {
        "page": "traffic",
        "window": window_name,
        "given": given,
        "hits": page.hits,
        "next_before": page.next_before,
        "targets": sorted(ctx.state.config.backends),
        "feedback_kinds": [*FEEDBACK_KINDS, "any"],
        "query": {**given, "window": window_name},
    }
    return ctx.render("traffic.html", **values)


def _conversation(row: InferenceRow) -> tuple[list[dict[str, Any]], list[str], str | None]:
    """The exchange as the served model saw it: messages, tool names and the answer's text."""
    try:
        messages, tools, answer = conversation_of(row.inference, LIVE_TRANSLATOR)
    except UnsupportedShape as exc:
        return [], [], f"(not readable as a conversation: {exc})"
    names = [str(t.get("function", {}).get("name", "?")) for t in tools]
    if answer is None:
        return messages, names, None
    text = answer.content or ""
    for call in answer.tool_calls:
        text += f"\n[tool call] {call.name}({call.arguments})"
    return messages, names, text


async def exchange_page(ctx: Ctx) -> Response:
    inference_id = ctx.request.path_params["inference_id"]
    row = await exchange(ctx.store, inference_id)
    if row is None:
        raise NotFoundError(f"no exchange {inference_id}")
    messages, tools, answer = await asyncio.to_thread(_conversation, row)
    return ctx.render(
        "exchange.html",
        page="traffic",
        row=row,
        inf=row.inference,
        messages=messages,
        tools=tools,
        answer=answer,
    )


async def episode_page(ctx: Ctx) -> Response:
    episode_id = ctx.request.path_params["episode_id"]
    hits = await episode(ctx.store, episode_id)
    if not hits:
        raise NotFoundError(f"no exchange in episode {episode_id}")
    cost = sum(h.cost_usd or 0.0 for h in hits)
    return ctx.render(
        "episode.html", page="traffic", episode_id=episode_id, hits=hits, total_cost=cost
    )
