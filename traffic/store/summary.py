"""Traffic summaries: the numbers per group, and how they are computed.

Per group (of ``route_target``, ``served_model``, ``api_key_id``, ``endpoint``, ``day`` (UTC
date, ``YYYY-MM-DD``)), one dict with the group's keys and:

- ``count``; ``errors``: status >= 400 or an error recorded;
- ``cost_usd``: sum of known costs (0.0 when none is known);
- ``latency_ms_p50/p90/p99`` and ``ttft_ms_p50/p90``: continuous percentiles (linear
  interpolation between closest ranks, as PostgreSQL's ``percentile_cont``), ``None`` without data;
- ``accepted``, ``rejected``, ``edited``: feedback rows of those kinds on the group's inferences;
- ``acceptance_rate`` = accepted / (accepted + rejected + edited), ``None`` without such feedback.

PostgreSQL aggregates in SQL (``percentile_cont``); SQLite streams one narrow row per inference
into :class:`SummaryAccumulator` on its reader thread. Groups without rows are omitted; rows are
sorted by group keys, ``None`` last.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

LATENCY_QUANTILES = (0.5, 0.9, 0.99)
TTFT_QUANTILES = (0.5, 0.9)


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Continuous percentile ``q`` in [0, 1] of ascending ``sorted_values``."""
    if not sorted_values:
        return None
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summary_row(
    keys: dict[str, Any],
    *,
    count: int,
    errors: int,
    cost_usd: float,
    latency: Sequence[float | None] | None,
    ttft: Sequence[float | None] | None,
    accepted: int,
    rejected: int,
    edited: int,
) -> dict[str, Any]:
    latency = latency or [None] * len(LATENCY_QUANTILES)
    ttft = ttft or [None] * len(TTFT_QUANTILES)
    judged = accepted + rejected + edited
    row = dict(keys)
    row.update(
        count=count,
        errors=errors,
        cost_usd=float(cost_usd),
        latency_ms_p50=latency[0],
        latency_ms_p90=latency[1],
        latency_ms_p99=latency[2],
        ttft_ms_p50=ttft[0],
        ttft_ms_p90=ttft[1],
        accepted=accepted,
        rejected=rejected,
        edited=edited,
        acceptance_rate=accepted / judged if judged else None,
    )
    return row


def sort_rows(rows: list[dict[str, Any]], group_by: Sequence[str]) -> list[dict[str, Any]]:
    def key(row: dict[str, Any]) -> tuple[tuple[bool, str], ...]:
        return tuple((row[k] is None, "" if row[k] is None else str(row[k])) for k in group_by)

    return sorted(rows, key=key)


@dataclass(slots=True)
class _Group:
    count: int = 0
    errors: int = 0
    cost_usd: float = 0.0
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    accepted: int = 0
    rejected: int = 0
    edited: int = 0


class SummaryAccumulator:
    """Folds narrow rows ``(*group keys, ok, cost, latency, ttft, accepted, rejected, edited)``."""

    def __init__(self, group_by: Sequence[str]) -> None:
        self._group_by = list(group_by)
        self._groups: dict[tuple[Any, ...], _Group] = {}

    def add_rows(self, rows: Iterable[Sequence[Any]]) -> None:
        n = len(self._group_by)
        for row in rows:
            key = tuple(row[:n])
            ok, cost, latency, ttft, accepted, rejected, edited = row[n:]
            g = self._groups.get(key)
            if g is None:
                g = self._groups[key] = _Group()
            g.count += 1
            g.errors += 0 if ok else 1
            if cost is not None:
                g.cost_usd += cost
            g.latencies.append(latency)
            if ttft is not None:
                g.ttfts.append(ttft)
            g.accepted += accepted
            g.rejected += rejected
            g.edited += edited

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for key, g in self._groups.items():
            g.latencies.sort()
            g.ttfts.sort()
            out.append(
                summary_row(
                    dict(zip(self._group_by, key, strict=True)),
                    count=g.count,
                    errors=g.errors,
                    cost_usd=g.cost_usd,
                    latency=[percentile(g.latencies, q) for q in LATENCY_QUANTILES],
                    ttft=[percentile(g.ttfts, q) for q in TTFT_QUANTILES],
                    accepted=g.accepted,
                    rejected=g.rejected,
                    edited=g.edited,
                )
            )
        return sort_rows(out, self._group_by)
