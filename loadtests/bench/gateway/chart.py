"""``chart.png``: one row of plots per mode, every system in its own colour.

Columns: requests/s and the server's CPU per request at the headline concurrency (bars, log
scales; for the simulator direct the CPU is the simulator's, for the others the gateway's or the
proxy's without the simulator), and p50 latency by concurrency (lines). Recording-on systems
share their twin's colour, hatched or dashed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from loadtests.bench.gateway.settings import HEADLINE_CONCURRENCY, SYSTEM_LABELS, SYSTEM_SPECS

COLOURS: Final = MappingProxyType(
    {
        "direct": "#7f7f7f",
        "direct_anthropic": "#bcbd22",
        "switchyard": "#1f77b4",
        "frontier_openai": "#2ca02c",
        "frontier_anthropic": "#9467bd",
        "translated_anthropic": "#17becf",
        "translated_openai": "#ff7f0e",
        "responses_anthropic": "#e377c2",
        "frontier_openai_secrets_rec": "#8c564b",
        "litellm": "#d62728",
    }
)


def _style(system: str) -> tuple[str, bool]:
    """Colour and whether recording is on."""
    twin = SYSTEM_SPECS[system].recording_of  # type: ignore[index]
    return COLOURS[twin or system], twin is not None


def _at_headline(rows: Sequence[Mapping[str, Any]], system: str, key: str) -> float | None:
    for row in rows:
        if row["system"] == system and row["concurrency"] == HEADLINE_CONCURRENCY:
            value = row.get(key)
            return None if value is None or value <= 0 else float(value)
    return None


def _bars(ax: Any, systems: Sequence[str], values: Sequence[float | None], labels: bool) -> None:
    ypos = list(range(len(systems)))
    for y, system, value in zip(ypos, systems, values, strict=True):
        if value is None:
            continue
        colour, recording = _style(system)
        ax.barh([y], [value], color=colour, edgecolor="black", hatch="//" if recording else None)
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.3g}"
        ax.annotate(f" {shown}", (value, y), va="center", fontsize=7)
    ax.set_yticks(ypos, [SYSTEM_LABELS[s] for s in systems] if labels else [], fontsize=7)
    ax.set_ylim(len(systems) - 0.5, -0.5)
    ax.set_xscale("log")
    shown_values = [v for v in values if v is not None]
    if shown_values:  # room for the largest bar's figure
        ax.set_xlim(min(shown_values) / 1.5, max(shown_values) * 3)
    ax.grid(True, axis="x", which="both", alpha=0.3)


def write_chart(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Per mode: req/s and server CPU ms/request at the headline concurrency (bars), p50
    latency by concurrency (lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(str(r["mode"]) for r in rows))
    systems = [s for s in SYSTEM_LABELS if any(r["system"] == s for r in rows)]
    fig, axes = plt.subplots(len(modes), 3, figsize=(17, 0.5 + 3.6 * len(modes)), squeeze=False)
    for i, mode in enumerate(modes):
        measured = [r for r in rows if r["mode"] == mode and r.get("rps") is not None]
        tokens = next((r.get("max_tokens") for r in measured), None)
        title = f"{mode} ({tokens} tokens)" if tokens else mode
        c = HEADLINE_CONCURRENCY
        _bars(axes[i][0], systems, [_at_headline(measured, s, "rps") for s in systems], True)
        axes[i][0].set_title(f"{title}: requests/s at c={c}", fontsize=9)
        cpu = [_at_headline(measured, s, "server_cpu_ms_per_request") for s in systems]
        _bars(axes[i][1], systems, cpu, False)
        axes[i][1].set_title(f"{title}: server CPU ms/request at c={c}", fontsize=9)
        ax = axes[i][2]
        for system in systems:
            points = sorted(
                (r["concurrency"], r["p50_ms"]) for r in measured if r["system"] == system
            )
            if points:
                colour, recording = _style(system)
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    marker="o",
                    color=colour,
                    linestyle="--" if recording else "-",
                    label=SYSTEM_LABELS[system] if i == 0 else None,
                )
        concurrencies = sorted({int(r["concurrency"]) for r in measured}) or [1]
        ax.set_title(f"{title}: p50 latency (ms) by concurrency", fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies, [str(x) for x in concurrencies])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
