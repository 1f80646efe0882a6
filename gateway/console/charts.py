"""Chart.js configurations built from the console's figures (plain JSON; the page's script,
``static/console.js``, draws every ``<canvas data-chart=...>`` and formats the axis it names).

``y_format`` is how an axis' ticks read: ``num``, ``pct`` (a 0-1 share as percent), ``usd`` or
``ms``. Colours come from one palette, in dataset order, so a target keeps its colour across the
charts of a page when it is given in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal

YFormat = Literal["num", "pct", "usd", "ms"]
PALETTE: Final = (
    "#2563eb",
    "#f97316",
    "#16a34a",
    "#dc2626",
    "#9333ea",
    "#0891b2",
    "#ca8a04",
    "#db2777",
    "#4b5563",
    "#65a30d",
)


def colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def time_labels(starts: Sequence[float], bucket_s: int) -> list[str]:
    """Bucket start times (unix seconds) as short UTC labels."""
    fmt = "%H:%M" if bucket_s < 6 * 3600 else "%m-%d %H:%M" if bucket_s < 86400 else "%m-%d"
    return [datetime.fromtimestamp(s, UTC).strftime(fmt) for s in starts]


def _chart(
    kind: str,
    labels: Sequence[str],
    datasets: list[dict[str, Any]],
    title: str,
    y_format: YFormat,
    *,
    stacked: bool = False,
) -> dict[str, Any]:
    return {
        "type": kind,
        "data": {"labels": list(labels), "datasets": datasets},
        "options": {
            "responsive": True,
            "maintainAspectRatio": False,
            "animation": False,
            "spanGaps": True,
            "plugins": {
                "title": {"display": True, "text": title},
                "legend": {"position": "bottom"},
            },
            "scales": {
                "x": {"stacked": stacked},
                "y": {"stacked": stacked, "beginAtZero": True},
            },
        },
        "yFormat": y_format,
    }


def stacked_bars(
    labels: Sequence[str], series: Mapping[str, Sequence[float]], title: str
) -> dict[str, Any]:
    datasets = [
        {"label": name, "data": list(values), "backgroundColor": colour(i)}
        for i, (name, values) in enumerate(series.items())
    ]
    return _chart("bar", labels, datasets, title, "num", stacked=True)


def lines(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    title: str,
    y_format: YFormat = "num",
    *,
    first_colour: int = 0,
) -> dict[str, Any]:
    datasets = [
        {
            "label": name,
            "data": list(values),
            "borderColor": colour(first_colour + i),
            "backgroundColor": colour(first_colour + i),
            "tension": 0.2,
            "pointRadius": 2,
        }
        for i, (name, values) in enumerate(series.items())
    ]
    return _chart("line", labels, datasets, title, y_format)


def bars(
    labels: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    title: str,
    y_format: YFormat = "num",
) -> dict[str, Any]:
    """Grouped bars: one group per label, one bar per series (e.g. live vs candidate)."""
    datasets = [
        {"label": name, "data": list(values), "backgroundColor": colour(i)}
        for i, (name, values) in enumerate(series.items())
    ]
    return _chart("bar", labels, datasets, title, y_format)
