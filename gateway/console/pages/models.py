"""Models: versions and lineage, gate reports, the weights each replica serves, drain and
undrain, hot-swap and rollback with progress.

Versions are the model registry's ``model_version`` rows (lineage by ``parent``, status
``candidate`` / ``promoted`` / ``retired`` / ``rejected``, evaluation figures); a version's gate
report is the flywheel round that gated it (:mod:`gateway.console.flywheel_runs`). Replicas and
their weights are this gateway's pools. Drain and undrain are the admin API's operations; a swap
is the RL loop's promotion command, run and followed by :mod:`gateway.console.swap_jobs`, whose
progress the page polls (``GET /ui/models/swap``, an htmx fragment every second while running).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from starlette.responses import RedirectResponse, Response

from gateway.access import admin_token
from gateway.admin import changes, operations
from gateway.console.flywheel_runs import gate_reports
from gateway.console.pages.routing import release_view
from gateway.console.swap_jobs import SwapJob, SwapKind, promote_command
from gateway.console.web import PREFIX, SECURITY_HEADERS, Ctx
from gateway.errors import InvalidRequestError, NotFoundError
from serving.names import ADMIN_TOKEN_ENV
from traffic.store import ModelVersionRecord
from traffic.store.forgetting import taints

DRAIN_TIMEOUT_S = 60.0


def lineage(versions: dict[str, ModelVersionRecord], version_id: str | None) -> list[str]:
    """``version_id`` and its recorded ancestors, newest first."""
    chain: list[str] = []
    current = version_id
    while current is not None and current in versions and current not in chain:
        chain.append(current)
        current = versions[current].parent
    return chain


def _replicas(ctx: Ctx) -> list[dict[str, Any]]:
    out = []
    for target, pool in sorted(ctx.state.targets.pools().items()):
        for r in pool.replicas.values():
            out.append(
                {
                    "target": target,
                    "url": r.url,
                    "healthy": r.healthy,
                    "drained": r.drained,
                    "in_flight": r.in_flight,
                    "weights_version": r.weights_version,
                }
            )
    return out


def _swap_view(ctx: Ctx) -> dict[str, Any]:
    job = ctx.request.app.state.console.swaps.current
    return {"job": job, "replicas": _replicas(ctx)}


async def models_page(ctx: Ctx) -> Response:
    records = await ctx.store.list_model_versions() if ctx.handle is not None else []
    versions = {r.id: r for r in records}
    gates, on_disk = await asyncio.to_thread(
        lambda: (
            gate_reports(ctx.config.flywheel_dir),
            {r.id for r in records if Path(r.path).is_dir()},
        )
    )
    replicas = _replicas(ctx)
    served = sorted({r["weights_version"] for r in replicas if r["weights_version"]})
    # Checkpoints that learned from forgotten records (traffic.forget): never promoted again,
    # and a served one needs retraining.
    found = await taints(ctx.store) if ctx.handle is not None else []
    tainted = {t.model_version_id: t for t in found}
    return ctx.render(
        "models.html",
        page="models",
        versions=sorted(records, key=lambda r: r.created_at, reverse=True),
        lineages={v: lineage(versions, v) for v in served},
        gates=gates,
        on_disk=on_disk,
        local_targets=ctx.local_targets(),
        canary=ctx.state.decider.canary,
        release=release_view(ctx),
        tainted=tainted,
        served_tainted=[v for v in served if v in tainted],
        **_swap_view(ctx),
    )


async def swap_status(ctx: Ctx) -> Response:
    return ctx.render("fragments/swap.html", **_swap_view(ctx))


def _back() -> Response:
    return RedirectResponse(f"{PREFIX}/models", 303, SECURITY_HEADERS)


async def drain(ctx: Ctx) -> Response:
    form = ctx.form()
    await operations.drain(
        ctx.request, ctx.operator, form.get("target", ""), form.get("replica", ""), DRAIN_TIMEOUT_S
    )
    return _back()


async def undrain(ctx: Ctx) -> Response:
    form = ctx.form()
    await operations.undrain(
        ctx.request, ctx.operator, form.get("target", ""), form.get("replica", ""), None
    )
    return _back()


async def _start_swap(ctx: Ctx, kind: SwapKind, checkpoint: ModelVersionRecord | None) -> None:
    target = ctx.form().get("target", "")
    pool = ctx.state.targets.pools().get(target)
    if pool is None:
        raise NotFoundError(f"no local target {target}")
    gateway_url = ctx.config.gateway_url or str(ctx.request.base_url).rstrip("/")
    replicas = list(pool.replicas)
    command = promote_command(
        kind,
        store_url=ctx.state.config.store.url,
        gateway_url=gateway_url,
        target=target,
        replicas=replicas,
        checkpoint=checkpoint.path if checkpoint else None,
    )
    version = checkpoint.id if checkpoint else None
    job = SwapJob(kind, ctx.operator, target, replicas, command, checkpoint=version)
    env = {**os.environ, ADMIN_TOKEN_ENV: admin_token(ctx.state) or ""}
    handle = ctx.handle

    async def done(finished: SwapJob) -> None:
        detail = {"target": target, "returncode": finished.returncode, "state": finished.state}
        await changes.record(handle, finished.operator, f"model.{kind}.end", version, detail)

    swaps = ctx.request.app.state.console.swaps
    if swaps.busy:
        raise InvalidRequestError("a weight swap is running: wait for it to end")
    detail = {"target": target, "replicas": replicas}
    await changes.record(handle, ctx.operator, f"model.{kind}", version, detail)
    await swaps.start(job, env, done)


async def publish(ctx: Ctx) -> Response:
    version_id = ctx.form().get("version", "")
    found = {r.id: r for r in await ctx.store.list_model_versions()}.get(version_id)
    if found is None:
        raise NotFoundError(f"no model version {version_id} in the registry")
    if not await asyncio.to_thread(Path(found.path).is_dir):
        raise InvalidRequestError(f"the files of {version_id} are gone ({found.path})")
    await _start_swap(ctx, "publish", found)
    return _back()


async def rollback(ctx: Ctx) -> Response:
    await _start_swap(ctx, "rollback", None)
    return _back()
