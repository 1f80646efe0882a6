"""Changes: every operator change, newest first, with who made it and when (the change log),
filtered by kind (routing, keys, teams, replicas, models)."""

from __future__ import annotations

from typing import Final

from starlette.responses import Response

from gateway.console.web import Ctx
from gateway.errors import InvalidRequestError
from traffic.store.console_queries import changes

KINDS: Final = {
    "": "all",
    "routing.": "routing",
    "key.": "keys",
    "team.": "teams",
    "replica.": "replicas",
    "model.": "models",
}
PAGE: Final = 200


async def history_page(ctx: Ctx) -> Response:
    kind = ctx.param("kind") or ""
    if kind not in KINDS:
        raise InvalidRequestError(f"kind must be one of {sorted(k for k in KINDS if k)}")
    rows = await changes(ctx.store, action_prefix=kind or None, limit=PAGE)
    return ctx.render("history.html", page="history", rows=rows, kind=kind, kinds=KINDS)
