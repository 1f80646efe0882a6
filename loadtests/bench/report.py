"""The run's figures: per-cell rows, the headline summary, and where they are written.

Definitions (every ratio from figures of the same run):

- ``rps``: requests completed in the window / window length;
- ``p50_ms``/``p99_ms``: latency to the last byte; ``ttfb_*``: to the first body byte (streams);
- ``added_p50_ms``: p50 of the system minus p50 of ``direct`` at the same mode and concurrency;
- ``server_cpu_ms_per_request``: CPU of the system's process tree over the window / requests
  (for ``direct`` that is the simulator; for the others, the simulator is not included and
  appears as ``upstream_cpu_ms_per_request``);
- ``gateway_cpu_ms_per_request``, ``added_p50_ms``, ``throughput_ratio_vs_litellm``,
  ``recording_on_off_throughput_ratio``: read at the headline cell (non-streamed, conc 16).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from loadtests.bench.loadgen import CellResult
from loadtests.bench.profile import ProfileSummary
from loadtests.bench.settings import (
    HEADLINE_CONCURRENCY,
    HEADLINE_MODE,
    SYSTEM_LABELS,
    Mode,
    SystemName,
)
from loadtests.bench.store_throughput import StoreFigure


@dataclass(frozen=True, slots=True)
class Cell:
    system: SystemName
    mode: Mode
    concurrency: int
    result: CellResult | None
    reason: str | None = None  # why result is None


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
            "upstream_cpu_ms_per_request": _round(
                _per_request(r.cpu_ms.get("upstream"), r.requests)
            ),
            "client_cpu_ms_per_request": _round(_per_request(r.client_cpu_ms, r.requests)),
            "window_s": _round(r.elapsed_s),
            "error_sample": r.error_sample,
            "reason": cell.reason,
        }
    )
    return row


def build_rows(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    direct = {(c.mode, c.concurrency): c for c in cells if c.system == "direct"}
    return [cell_row(c, direct.get((c.mode, c.concurrency))) for c in cells]


def _find(
    rows: Sequence[Mapping[str, Any]], system: str, mode: str = HEADLINE_MODE
) -> Mapping[str, Any] | None:
    for row in rows:
        if (row["system"], row["mode"], row["concurrency"]) == (
            system,
            mode,
            HEADLINE_CONCURRENCY,
        ):
            return row
    return None


def _ratio(num: Mapping[str, Any] | None, den: Mapping[str, Any] | None) -> float | None:
    if num is None or den is None or not num.get("rps") or not den.get("rps"):
        return None
    return round(float(num["rps"]) / float(den["rps"]), 3)


def headline(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    gw = _find(rows, "switchyard")
    return {
        "gateway_cpu_ms_per_request": gw.get("server_cpu_ms_per_request") if gw else None,
        "added_p50_ms": gw.get("added_p50_ms") if gw else None,
        "throughput_ratio_vs_litellm": _ratio(gw, _find(rows, "litellm")),
        "recording_on_off_throughput_ratio": _ratio(_find(rows, "switchyard_rec"), gw),
    }


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


def print_table(console: Console, rows: Sequence[Mapping[str, Any]]) -> None:
    table = Table(title="Gateway benchmark (latency to last byte; CPU = server process tree)")
    for name, justify in (
        ("system", "left"),
        ("mode", "left"),
        ("conc", "right"),
        ("req/s", "right"),
        ("p50 ms", "right"),
        ("p99 ms", "right"),
        ("TTFB p50", "right"),
        ("added p50", "right"),
        ("CPU ms/req", "right"),
        ("sim CPU ms/req", "right"),
        ("errors", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        if row.get("rps") is None:
            label = SYSTEM_LABELS[row["system"]]
            reason = str(row.get("reason"))[:60]
            table.add_row(label, row["mode"], str(row["concurrency"]), f"[red]{reason}[/red]")
            continue
        table.add_row(
            SYSTEM_LABELS[row["system"]],
            row["mode"],
            str(row["concurrency"]),
            _fmt(row["rps"], 0),
            _fmt(row["p50_ms"]),
            _fmt(row["p99_ms"]),
            _fmt(row["ttfb_p50_ms"]),
            _fmt(row["added_p50_ms"]),
            _fmt(row["server_cpu_ms_per_request"]),
            _fmt(row["upstream_cpu_ms_per_request"]),
            _fmt(row["errors"], 0),
        )
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


def write_chart(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """RPS and p50 by concurrency, one line per system, one row of plots per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(str(r["mode"]) for r in rows))
    concurrencies = sorted({int(r["concurrency"]) for r in rows})
    fig, axes = plt.subplots(len(modes), 2, figsize=(11, 4 * len(modes)), squeeze=False)
    for i, mode in enumerate(modes):
        for system, label in SYSTEM_LABELS.items():
            points = sorted(
                (r["concurrency"], r["rps"], r["p50_ms"])
                for r in rows
                if r["system"] == system and r["mode"] == mode and r.get("rps") is not None
            )
            if not points:
                continue
            conc = [p[0] for p in points]
            axes[i][0].plot(conc, [p[1] for p in points], marker="o", label=label)
            axes[i][1].plot(conc, [p[2] for p in points], marker="o", label=label)
        for j, (metric, scale) in enumerate((("requests/s", "log"), ("p50 latency (ms)", "log"))):
            ax = axes[i][j]
            ax.set_title(f"{mode}: {metric}")
            ax.set_xlabel("concurrency")
            ax.set_xscale("log", base=2)
            ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
            ax.minorticks_off()
            ax.set_yscale(scale)
            ax.grid(True, which="both", alpha=0.3)
        axes[i][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
