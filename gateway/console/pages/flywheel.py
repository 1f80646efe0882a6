"""Flywheel: the runs of the loop (traffic -> record -> train -> gate -> swap -> refit), each
round's curves (local share, accept rate, cost per 1k requests, latency p50: overall, on the
classes the local model can learn, and beyond them) and each round's report.

Read from the files the runs write (:mod:`gateway.console.flywheel_runs`); the curves are the
run's ``report.json`` figures (definitions: ``rl_loop/report.py``), drawn by Chart.js.
"""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response

from gateway.console import charts
from gateway.console.flywheel_runs import RunSummary, list_runs, read_round, read_run
from gateway.console.web import Ctx
from gateway.errors import NotFoundError

CURVES = (
    ("local_share", "Local share", "pct"),
    ("accept_overall", "Accept rate", "pct"),
    ("cost_per_1k_usd", "Cost per 1k requests", "usd"),
    ("latency_p50_ms", "Latency p50", "ms"),
)
SLICES = ("overall", "learnable", "beyond")


def curves(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One line chart per figure over the rounds, a line per slice of the traffic."""
    rounds = report.get("rounds") or []
    labels = [f"round {r.get('round')}" for r in rounds]
    out = []
    for key, title, fmt in CURVES:
        series = {s: [(r.get(s) or {}).get(key) for r in rounds] for s in SLICES}
        out.append(charts.lines(labels, series, title, fmt))  # type: ignore[arg-type]
    return out


async def flywheel_page(ctx: Ctx) -> Response:
    root = ctx.config.flywheel_dir
    names = await asyncio.to_thread(list_runs, root)
    name = ctx.param("run") or (names[0] if names else None)
    run: RunSummary | None = None
    if name is not None:
        run = await asyncio.to_thread(read_run, root, name)
        if run is None:
            raise NotFoundError(f"no flywheel run {name} in {root}")
    report = run.report if run else None
    return ctx.render(
        "flywheel.html",
        page="flywheel",
        root=str(root),
        names=names,
        run=run,
        report=report,
        charts=curves(report) if report else [],
        figures=(report or {}).get("rounds") or [],
        targets=(report or {}).get("targets") or {},
    )


async def round_page(ctx: Ctx) -> Response:
    name = ctx.request.path_params["run"]
    try:
        n = int(ctx.request.path_params["round"])
    except ValueError as exc:
        raise NotFoundError("no such round") from exc
    found = await asyncio.to_thread(read_round, ctx.config.flywheel_dir, name, n)
    if found is None:
        raise NotFoundError(f"no round {n} in flywheel run {name}")
    data, gate_text = found
    return ctx.render("round.html", page="flywheel", run=name, n=n, data=data, gate_text=gate_text)
