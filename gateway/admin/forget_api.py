"""Admin API for forgetting: ``POST /admin/forget``.

Body: :class:`ForgetRequest`: exactly one of ``key_id``, ``team_id``, ``inference_id``, and the
folders of exported datasets to search besides those the lineage links (``export_roots``, on
the gateway's disk). The gateway forgets in its store, in its own spool and dead letters
(``store.spool_dir``) and in those exports, taints the checkpoints trained on the records and
writes the audit entry with the request's actor (:mod:`traffic.forget`); it answers what it did.
Another gateway's spool on another machine is not reached: run ``switchyard traffic forget``
there with ``--spool-dir`` (the store's part is done already; a run changes only what is left).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from gateway.admin.dependencies import Actor, AdminState, Store
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from traffic.forget import ForgetScope, forget


class ForgetRequest(ForgetScope):
    """``POST /admin/forget``: what to forget, and where else exported datasets may be."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    export_roots: tuple[Path, ...] = Field(
        default=(), description="folders of exported datasets to search (on the gateway's disk)"
    )


class ForgetAnswer(BaseModel):
    """What the forget did: its audit entry's id, its scope, and the entry's detail (ids, paths
    and counts: ``database``, ``spool``, ``exports``, ``tainted`` ...)."""

    model_config = ConfigDict(extra="forbid")

    forget_id: str
    subject: str
    complete: bool = Field(description="false: a spool segment was busy; forget again")
    detail: dict[str, Any]


async def forget_scope(
    state: AdminState, handle: Store, actor: Actor, body: ForgetRequest
) -> ForgetAnswer:
    """Forget the scope's records everywhere this gateway reaches; taint what trained on them."""
    scope = ForgetScope.model_validate(body.model_dump(exclude={"export_roots"}))
    report = await forget(
        handle.backend,
        scope,
        actor=actor,
        spool_dirs=[state.config.store.spool_dir],
        export_roots=body.export_roots,
        legacy=LIVE_TRANSLATOR,
    )
    complete = not report.spool.busy and not report.exports.unknown
    return ForgetAnswer(
        forget_id=report.forget_id,
        subject=report.subject,
        complete=complete,
        detail=report.detail(),
    )


def add_routes(router: APIRouter) -> None:
    """The forget route, on the admin router."""
    router.add_api_route("/forget", forget_scope, methods=["POST"])
