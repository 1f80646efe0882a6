"""``switchyard traffic summary`` as rich tables that stay whole in the terminal's width.

Layout: one row per group with a column per figure (short headers, compact numbers, nothing
wrapped) when that fits the console; otherwise the table turns: one row per figure, one column
per group, and as many groups side by side as fit (a group's name folds onto more lines, a
figure never does). An 80-column terminal gets the turned layout (the twelve figures need about
100 columns side by side); nothing is ever cut to "…".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from rich.console import Console
from rich.table import Table
from rich.text import Text

TITLE: Final = "Switchyard traffic"
# Each figure: (header side by side, name in the turned table).
FIGURES: Final[dict[str, tuple[str, str]]] = {
    "count": ("n", "requests"),
    "errors": ("err", "errors"),
    "cost_usd": ("cost $", "cost (USD)"),
    "latency_ms_p50": ("p50 ms", "latency p50 (ms)"),
    "latency_ms_p90": ("p90 ms", "latency p90 (ms)"),
    "latency_ms_p99": ("p99 ms", "latency p99 (ms)"),
    "ttft_ms_p50": ("ttft p50", "TTFT p50 (ms)"),
    "ttft_ms_p90": ("ttft p90", "TTFT p90 (ms)"),
    "accepted": ("acc", "accepted"),
    "rejected": ("rej", "rejected"),
    "edited": ("edit", "edited"),
    "acceptance_rate": ("acc %", "acceptance"),
}
GROUPS: Final = {
    "route_target": "target",
    "served_model": "model",
    "api_key_id": "key",
    "endpoint": "endpoint",
    "day": "day",
}
GROUP_WIDTH: Final = 20  # a group's column in the turned table; longer names fold
_CELL_EDGES: Final = 3  # a column's padding (2) and its right border (1)
_UNBOUNDED: Final = 100_000


def fmt_figure(name: str, value: Any) -> str:
    """A figure in a few characters: integers whole, rates as percents, a cost under a dollar to
    six decimals, other numbers to three significant digits below 100 and whole above (thousands
    grouped), a missing figure as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if name == "acceptance_rate":
        return f"{value:.0%}"
    if name == "cost_usd" and abs(value) < 1:
        return f"{value:.6f}"  # to the micro-dollar, as a request costs
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _group_label(row: Mapping[str, Any], by: Sequence[str]) -> list[str]:
    return [str(row[g]) if row[g] is not None else "-" for g in by] or ["all"]


def wide_table(rows: Sequence[Mapping[str, Any]], by: Sequence[str]) -> Table:
    """One row per group, one column per group key and figure."""
    table = Table(title=TITLE)
    figures = [c for c in (rows[0] if rows else FIGURES) if c not in by]
    for key in by:
        table.add_column(GROUPS.get(key, key), no_wrap=True)
    for name in figures:
        table.add_column(FIGURES.get(name, (name, name))[0], justify="right", no_wrap=True)
    for row in rows:
        groups = [str(row[g]) if row[g] is not None else "-" for g in by]
        table.add_row(*map(Text, groups), *(fmt_figure(n, row[n]) for n in figures))
    return table


def turned_tables(rows: Sequence[Mapping[str, Any]], by: Sequence[str], width: int) -> list[Table]:
    """One row per figure, one column per group; as many groups per table as ``width`` holds."""
    figures = [c for c in (rows[0] if rows else FIGURES) if c not in by]
    names = [FIGURES.get(n, (n, n))[1] for n in figures]
    keys = [GROUPS.get(g, g) for g in by]
    name_width = max((len(n) for n in [*names, *keys]), default=0)
    cells = [[fmt_figure(n, row[n]) for n in figures] for row in rows]
    labels = [_group_label(row, by) for row in rows]
    widths = [
        max(max((len(c) for c in col), default=1), min(GROUP_WIDTH, max(map(len, label))))
        for col, label in zip(cells, labels, strict=True)
    ]
    chunks: list[list[int]] = [[]]
    used = 1 + name_width + _CELL_EDGES
    for i, w in enumerate(widths):
        if chunks[-1] and used + w + _CELL_EDGES > width:
            chunks.append([])
            used = 1 + name_width + _CELL_EDGES
        chunks[-1].append(i)
        used += w + _CELL_EDGES
    tables = []
    for part, chunk in enumerate(chunks, start=1):
        title = TITLE if len(chunks) == 1 else f"{TITLE} ({part}/{len(chunks)})"
        table = Table(title=title)
        table.add_column("\n".join(keys), no_wrap=True)  # beside each group's label lines
        for i in chunk:
            label = Text("\n".join(labels[i]))  # a stored name, never markup
            table.add_column(label, justify="right", overflow="fold", min_width=widths[i])
        for f, name in enumerate(names):
            table.add_row(name, *(cells[i][f] for i in chunk))
        tables.append(table)
    return tables


def print_summary(rows: Sequence[Mapping[str, Any]], by: Sequence[str], console: Console) -> None:
    """``rows`` (:func:`traffic.export.summarize`'s, grouped ``by``) as whole tables."""
    if not rows:
        console.print("no recorded traffic matches")
        return
    wide = wide_table(rows, by)
    unbounded = console.options.update_width(_UNBOUNDED)  # a table's measure is capped by it
    if console.measure(wide, options=unbounded).maximum <= console.width:
        console.print(wide)
        return
    for table in turned_tables(rows, by, console.width):
        console.print(table)
