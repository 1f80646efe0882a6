"""The run's cells as rows, the tables printed, and the files written (JSON, CSV).

Definitions (every ratio from figures of the same run; the headline figures and their targets
are in :mod:`loadtests.bench.gateway.figures`, the chart in :mod:`loadtests.bench.gateway.chart`):

- ``rps``: requests completed in the window / window length;
- ``p50_ms``/``p99_ms``: latency to the last byte; ``ttfb_*``: to the first body byte (streams);
- ``added_p50_ms``: p50 of the system minus p50 of the simulator direct in the same wire format
  (``direct`` or ``direct_anthropic``) at the same mode and concurrency;
- ``server_cpu_ms_per_request``: CPU of the system's process tree over the window / requests
  (for the simulator direct that is the simulator; for the others, the simulator is not
  included and appears as ``upstream_cpu_ms_per_request``);
- ``server_process_cpu_ms_per_request``: the same for the system's process alone, without its
  children (a recording gateway's writer process is the difference);
- ``events_per_answer``: SSE events of a complete streamed answer, as received;
- ``other_cpu_percent``: CPU used by processes outside the cell (not the servers watched, not
  the load generator) during its window, as a share of all cores: a cell with a large share
  measured a shared machine, and its req/s is not comparable with its neighbours'.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from loadtests.bench.gateway.loadgen import CellResult
from loadtests.bench.gateway.profile import ProfileSummary
from loadtests.bench.gateway.settings import SYSTEM_LABELS, SYSTEM_SPECS, Mode, SystemName
from loadtests.bench.store import StoreFigure


@dataclass(frozen=True, slots=True)
class Cell:
    system: SystemName
    mode: Mode
    concurrency: int
    result: CellResult | None
    reason: str | None = None  # why result is None
    max_tokens: int | None = None  # answer length asked for


def _per_request(total_ms: float | None, requests: int) -> float | None:
    return None if total_ms is None or requests == 0 else total_ms / requests


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def cell_row(cell: Cell, baseline: Cell | None) -> dict[str, Any]:
    """One cell as a flat dict (the CSV row and the JSON entry)."""
    row: dict[str, Any] = {
        "system": cell.system,
        "mode": cell.mode,
        "concurrency": cell.concurrency,
        "max_tokens": cell.max_tokens,
    }
    r = cell.result
    if r is None:
        return {**row, "requests": 0, "reason": cell.reason}
    p50 = r.latency_ms.p50 if r.latency_ms else None
    base = baseline.result if baseline is not None else None
    base_p50 = base.latency_ms.p50 if base is not None and base.latency_ms else None
    row.update(
        {
            "requests": r.requests,
            "errors": r.errors,
            "rps": _round(r.rps, 1),
            "p50_ms": _round(p50),
            "p99_ms": _round(r.latency_ms.p99 if r.latency_ms else None),
            "ttfb_p50_ms": _round(r.ttfb_ms.p50 if r.ttfb_ms else None),
            "ttfb_p99_ms": _round(r.ttfb_ms.p99 if r.ttfb_ms else None),
            "added_p50_ms": _round(
                p50 - base_p50 if p50 is not None and base_p50 is not None else None
            ),
            "server_cpu_ms_per_request": _round(_per_request(r.cpu_ms.get("server"), r.requests)),
            "server_process_cpu_ms_per_request": _round(
                _per_request(r.root_cpu_ms.get("server"), r.requests)
            ),
            "upstream_cpu_ms_per_request": _round(
                _per_request(r.cpu_ms.get("upstream"), r.requests)
            ),
            "client_cpu_ms_per_request": _round(_per_request(r.client_cpu_ms, r.requests)),
            "events_per_answer": _round(r.events_per_answer, 2),
            "other_cpu_percent": _round(r.other_cpu_percent, 1),
            "window_s": _round(r.elapsed_s),
            "error_sample": r.error_sample,
            "reason": cell.reason,
        }
    )
    return row


def build_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    """One row per cell; each compared with its format's simulator direct (``added_p50_ms``)."""
    by_key = {(c.system, c.mode, c.concurrency): c for c in cells}
    return [
        cell_row(c, by_key.get((SYSTEM_SPECS[c.system].baseline, c.mode, c.concurrency)))
        for c in cells
    ]


def store_section(figures: Mapping[str, StoreFigure]) -> dict[str, Any]:
    return {
        "store_write_records_per_s": {
            name: _round(f.records_per_s, 1) for name, f in figures.items()
        },
        "store_write": {name: asdict(f) for name, f in figures.items()},
    }


def profile_section(
    summaries: Mapping[str, ProfileSummary] | None, reason: str | None
) -> dict[str, Any]:
    if summaries is None:
        return {"profile": None, "profile_reason": reason}
    out: dict[str, Any] = {}
    for name, summary in summaries.items():
        data = asdict(summary)
        data["gc_percent"] = round(summary.gc_percent, 1)
        for key in (
            "by_package",
            "top_self",
            "top_inclusive_switchyard",
            "top_inclusive_frameworks",
        ):
            data[key] = [{**s, "percent": round(s["percent"], 1)} for s in data[key][:10]]
        out[name] = data
    return {"profile": out}


def print_profile(console: Console, summaries: Mapping[str, ProfileSummary]) -> None:
    for name, summary in summaries.items():
        table = Table(
            title=f"Gateway profile ({name}): {summary.total_samples} busy main-thread samples "
            f"({summary.idle_samples} idle left out)"
        )
        table.add_column("share", justify="right")
        table.add_column("kind")
        table.add_column("package")
        table.add_column("function")
        for kind, spots in (
            ("package", summary.by_package[:8]),
            ("self", summary.top_self[:10]),
            ("incl. own", summary.top_inclusive_switchyard[:8]),
        ):
            for spot in spots:
                shown = "" if kind == "package" else spot.function
                table.add_row(f"{spot.percent:.1f}%", kind, spot.package, shown)
        if name == "native":
            table.add_row(f"{summary.gc_percent:.1f}%", "gc", "cpython", "cyclic GC (inclusive)")
        console.print(table)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _mode_label(row: Mapping[str, Any]) -> str:
    tokens = row.get("max_tokens")
    return str(row["mode"]) if tokens is None else f"{row['mode']} {tokens}"


# The cell table in two parts, each readable in an 80-column terminal: what a client sees, then
# what it cost the server. Each part repeats the cell's system, mode and concurrency.
_CLIENT_COLUMNS: Final = (
    ("req/s", "rps", 0),
    ("p50 ms", "p50_ms", 1),
    ("p99 ms", "p99_ms", 1),
    ("TTFB p50", "ttfb_p50_ms", 1),
    ("added p50", "added_p50_ms", 1),
)
_COST_COLUMNS: Final = (
    ("CPU ms/req", "server_cpu_ms_per_request", 3),
    ("sim CPU", "upstream_cpu_ms_per_request", 3),
    ("events", "events_per_answer", 1),
    ("other CPU%", "other_cpu_percent", 0),
    ("errors", "errors", 0),
)


def print_table(console: Console, rows: Sequence[Mapping[str, Any]]) -> None:
    """Every cell's figures, as two tables (client side, then server cost)."""
    parts = (
        ("Gateway benchmark: what clients see (latency to last byte, ms)", _CLIENT_COLUMNS),
        (
            "Gateway benchmark: server cost (CPU = server process tree; sim = simulator)",
            _COST_COLUMNS,
        ),
    )
    for title, columns in parts:
        table = Table(title=title + "; +rec = recording on (SQLite)")
        for name, justify in (("system", "left"), ("mode", "left"), ("conc", "right")):
            table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
        for header, _, _ in columns:
            table.add_column(header, justify="right", no_wrap=True)
        for row in rows:
            cells = [SYSTEM_LABELS[row["system"]], _mode_label(row), str(row["concurrency"])]
            if row.get("rps") is None:
                cells.append(f"[red]{str(row.get('reason'))[:40]}[/red]")
            else:
                for _, key, digits in columns:
                    text = _fmt(row.get(key), digits)
                    cells.append(f"[red]{text}[/red]" if key == "errors" and row[key] else text)
            table.add_row(*cells)
        console.print(table)


def print_targets(console: Console, checked: Sequence[Mapping[str, Any]]) -> None:
    """The headline figures beside their targets (:mod:`loadtests.bench.gateway.figures`)."""
    table = Table(title="Targets (same-run figures; CPU/req at c=16)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", justify="left")
    verdicts = {True: "[green]pass[/green]", False: "[red]FAIL[/red]", None: "not measured"}
    for target in checked:
        value = target["value"]
        table.add_row(target["figure"], _fmt(value, 3), target["target"], verdicts[target["pass"]])
    console.print(table)


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_json(path: Path, summary: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
