"""Overview: what the traffic of a window did, over time and per group.

Requests by route target over time, the local share (requests a ``vllm`` target served / all),
cost per 1k requests, the accept rate (accepted / judged by feedback), latency and TTFT
percentiles, errors and failovers; the table breaks them down by a chosen group (route target,
the decision that routed the request, the learned scorer's bucket, the request class tag, ...).
Definitions: :mod:`traffic.store.console_queries` and :mod:`traffic.store.summary`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Final

from starlette.responses import Response

from gateway.console import charts
from gateway.console.figures import group_figures, rolled, time_series
from gateway.console.web import Ctx
from gateway.errors import InvalidRequestError
from traffic.store.console_queries import GROUPS, SeriesPoint

GROUP_LABELS: Final = {
    "route_target": "route target",
    "decision": "routing decision",
    "p_local": "scorer bucket (p_local)",
    "served_model": "served model",
    "endpoint": "endpoint",
    "api_key_id": "API key",
}


def group_choices(class_tag: str) -> dict[str, str]:
    return {**GROUP_LABELS, f"tag:{class_tag}": f"request class (tag {class_tag})"}


def figures(row: dict[str, Any]) -> dict[str, Any]:
    """A breakdown row with the ratios the page shows."""
    n = row["count"]
    judged = row["accepted"] + row["rejected"] + row["edited"]
    return {
        **row,
        "local_share": row["local"] / n if n else None,
        "cost_per_1k": 1000 * row["cost_usd"] / n if n else None,
        "judged": judged,
        "error_rate": row["errors"] / n if n else None,
    }


def _over_time(
    points: list[SeriesPoint], bucket_s: int, local: set[str]
) -> tuple[list[str], dict[str, list[float]], dict[str, list[float | None]]]:
    buckets = sorted({p.bucket_start for p in points})
    if buckets:  # every bucket of the span, empty ones included
        buckets = [
            buckets[0] + i * bucket_s
            for i in range(int((buckets[-1] - buckets[0]) // bucket_s) + 1)
        ]
    index = {b: i for i, b in enumerate(buckets)}
    targets = sorted({p.route_target for p in points})
    requests: dict[str, list[float]] = {t: [0.0] * len(buckets) for t in targets}
    total = [0.0] * len(buckets)
    local_n = [0.0] * len(buckets)
    cost = [0.0] * len(buckets)
    errors = [0.0] * len(buckets)
    for p in points:
        i = index[p.bucket_start]
        requests[p.route_target][i] += p.requests
        total[i] += p.requests
        cost[i] += p.cost_usd
        errors[i] += p.errors
        if p.route_target in local:
            local_n[i] += p.requests
    ratios: dict[str, list[float | None]] = defaultdict(list)
    for i in range(len(buckets)):
        n = total[i]
        ratios["local share"].append(local_n[i] / n if n else None)
        ratios["cost per 1k"].append(1000 * cost[i] / n if n else None)
        ratios["error rate"].append(errors[i] / n if n else None)
    return charts.time_labels(buckets, bucket_s), requests, ratios


async def overview(ctx: Ctx) -> Response:
    window_name, window, bucket_s = ctx.window()
    by = ctx.param("by") or "route_target"
    choices = group_choices(ctx.config.class_tag)
    if by not in choices and by not in GROUPS:
        raise InvalidRequestError(f"by must be one of {sorted(choices)}")
    local = ctx.local_targets()
    store = ctx.store
    total_rows = await group_figures(store, window, "all", local)
    rows = [figures(r) for r in await group_figures(store, window, by, local)]
    points = await time_series(store, window, bucket_s)
    labels, requests, ratios = _over_time(points, bucket_s, set(local))
    chart_specs = {
        "requests": charts.stacked_bars(labels, requests, "Requests by route target"),
        "share": charts.lines(
            labels, {"local share": ratios["local share"]}, "Local share", "pct", first_colour=2
        ),
        "cost": charts.lines(
            labels,
            {"cost per 1k": ratios["cost per 1k"]},
            "Cost per 1k requests",
            "usd",
            first_colour=1,
        ),
        "errors": charts.lines(
            labels, {"error rate": ratios["error rate"]}, "Error rate", "pct", first_colour=3
        ),
    }
    return ctx.render(
        "overview.html",
        page="overview",
        window=window_name,
        by=by,
        choices=choices,
        total=figures(total_rows[0]) if total_rows else None,
        rows=rows,
        charts=chart_specs,
        local_targets=local,
        approximate=rolled(window),
    )
