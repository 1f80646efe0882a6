"""The headline figures and the targets they are held to, all from figures of the same run.

Every figure is read at the headline concurrency (c=16), throughput and CPU per request alike:

- ``gateway_cpu_ms_per_request``, ``added_p50_ms``, ``throughput_ratio_vs_litellm``,
  ``recording_on_off_throughput_ratio``: the local path (``switchyard``), non-streamed, as
  before the frontier path was measured;
- ``frontier_cpu_ms_per_request.<format>.<mode>``: the gateway process tree's CPU over the cell
  / requests on the frontier path (``frontier_openai``, ``frontier_anthropic``), non-streamed
  and the short stream (``max_tokens`` tokens); the simulator's CPU is not in it;
- ``frontier_cpu_vs_upstream.<format>.<mode>``: that CPU over the simulator's own per request
  in the same cell: the gateway's cost in units of a minimal HTTP server's at the same moment
  (no target: it reads a missed absolute figure, this VM's speed varying ~2x; it stays 1.5-1.7);
- ``cpu_us_per_extra_chunk.<system>``: (server CPU per request of the long stream - of the short
  stream) / (SSE events per answer of the long stream - of the short one), as received by the
  load generator (``long_stream_tokens - max_tokens`` events when nothing is merged or lost);
- ``frontier_stream_vs_litellm.<format>``: the frontier path's short-stream req/s / the LiteLLM
  proxy's (the proxy speaks OpenAI only, so ``anthropic`` compares across formats and is shown
  without a target);
- ``translated_cpu_ms_per_request.<path>.<mode>``, ``translated_stream_vs_litellm.<path>``: the
  same for the paths that translate between formats (:data:`TRANSLATED_SYSTEMS`: chat door ->
  Anthropic upstream, Messages door -> OpenAI upstream, Responses door -> Anthropic upstream);
- ``recording_on_off.<system>.<mode>``: req/s with recording on / off, per path, unary and short
  stream: the median over the main cells' pair and ``recording_rounds`` more back-to-back pairs
  (``recording_on_off_rounds`` lists them); ``recording_on_off_cpu.<system>.<mode>``: the main
  pair's gateway CPU per request, off / on (the throughput ratio of a CPU-bound gateway; it
  holds where other processes disturb the req/s, see ``other_cpu_percent``; no target);
  ``recording_cost_us_per_request.<system>.<mode>``: where the main pair's extra CPU goes, in
  us per request: ``serving_process`` (the gateway process alone, on minus off) and
  ``writer_process`` (the recording gateway's writer child: its tree minus its process);
- ``secrets_redact_cpu_ms_per_request.<mode>``, ``secrets_redact_cpu_added_us.<mode>``: CPU
  per request of ``frontier_openai_secrets_rec`` (``secrets: redact``, a token in the prompt),
  and what it adds to ``frontier_openai_rec``'s in us (no target; long prompts: secret_scan);
- ``added_ttft_ms.<system>``: time to first byte at c=1, a 30-token stream, minus the direct
  request of its round (:mod:`~loadtests.bench.gateway.ttft`); targets on ``frontier_openai``;
- ``time_to_ready_s.<server>``: spawn -> first 200 from ``/ready`` (each server started alone);
  ``rss_mb.<server>``, ``peak_rss_mb.<server>``: ``VmRSS``, ``VmHWM`` after the whole load.

:data:`TARGETS` says which of them pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from loadtests.bench.gateway.settings import (
    GATEWAY_SERVERS,
    HEADLINE_CONCURRENCY,
    HEADLINE_MODE,
    SYSTEM_SPECS,
    Mode,
    ServerName,
)
from loadtests.bench.servers import Memory

Row = Mapping[str, Any]
T = TypeVar("T")
FRONTIER_SYSTEMS: Final = {"openai": "frontier_openai", "anthropic": "frontier_anthropic"}
# issue 45's translated paths: door -> upstream of another format
TRANSLATED_SYSTEMS: Final = {
    "chat_to_anthropic": "translated_anthropic",
    "messages_to_openai": "translated_openai",
    "responses_to_anthropic": "responses_anthropic",
}
SECRETS_SYSTEM: Final = "frontier_openai_secrets_rec"  # its twin: frontier_openai_rec
RECORDING_MODES: Final[tuple[Mode, ...]] = ("unary", "stream")
# A cell where processes outside the benchmark used more than this share of all cores measured
# a shared machine: its req/s (and every ratio built on it) is not trustworthy.
SHARED_MACHINE_PERCENT: Final = 10.0


@dataclass(frozen=True, slots=True)
class Target:
    """A figure (a dotted path into :func:`headline`'s dict) held to a limit."""

    figure: str
    limit: float
    at_most: bool  # True: passes when value <= limit; False: when value >= limit
    unit: str


def _targets() -> tuple[Target, ...]:
    found: list[Target] = []
    for wire in FRONTIER_SYSTEMS:
        found.append(Target(f"frontier_cpu_ms_per_request.{wire}.unary", 1.0, True, "ms"))
        found.append(Target(f"frontier_cpu_ms_per_request.{wire}.stream", 1.5, True, "ms"))
    for system in FRONTIER_SYSTEMS.values():
        found.append(Target(f"cpu_us_per_extra_chunk.{system}", 15.0, True, "us"))
    found.append(Target("frontier_stream_vs_litellm.openai", 20.0, False, "x"))
    # issue 45: a cross-format call through litellm's classes, against its whole proxy
    for path in TRANSLATED_SYSTEMS:
        found.append(Target(f"translated_cpu_ms_per_request.{path}.unary", 1.5, True, "ms"))
        found.append(Target(f"translated_cpu_ms_per_request.{path}.stream", 2.0, True, "ms"))
        found.append(Target(f"translated_stream_vs_litellm.{path}", 20.0, False, "x"))
    # issue 45: what the gateway adds to time to first byte at c=1 (interleaved)
    found.append(Target("added_ttft_ms.frontier_openai.added_p50_ms", 0.5, True, "ms"))
    found.append(Target("added_ttft_ms.frontier_openai.added_p99_ms", 1.0, True, "ms"))
    for spec in SYSTEM_SPECS.values():
        if spec.recording_of is not None:
            for mode in RECORDING_MODES:
                figure = f"recording_on_off.{spec.recording_of}.{mode}"
                found.append(Target(figure, 0.9, False, "x"))
    for server in GATEWAY_SERVERS:
        found.append(Target(f"time_to_ready_s.{server}", 2.0, True, "s"))
    for server in GATEWAY_SERVERS:
        found.append(Target(f"rss_mb.{server}", 300.0, True, "MB"))
    return tuple(found)


TARGETS: Final = _targets()


def find(rows: Sequence[Row], system: str, mode: str = HEADLINE_MODE) -> Row | None:
    """The row of ``system`` in ``mode`` at the headline concurrency."""
    for row in rows:
        if (row["system"], row["mode"], row["concurrency"]) == (
            system,
            mode,
            HEADLINE_CONCURRENCY,
        ):
            return row
    return None


def _ratio(num: Row | None, den: Row | None) -> float | None:
    if num is None or den is None or not num.get("rps") or not den.get("rps"):
        return None
    return round(float(num["rps"]) / float(den["rps"]), 3)


def _median_ratio(first: float | None, more: Sequence[float]) -> float | None:
    values = sorted([first, *more] if first is not None else list(more))
    if not values:
        return None
    mid = len(values) // 2
    median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return round(median, 3)


def _cpu(row: Row | None, key: str = "server_cpu_ms_per_request") -> float | None:
    value = row.get(key) if row is not None else None
    return None if value is None else float(value)


def _cpu_ratio(num: Row | None, den: Row | None) -> float | None:
    a, b = _cpu(num), _cpu(den)
    return None if a is None or not b else round(a / b, 3)


def _cpu_vs_upstream(row: Row | None) -> float | None:
    gateway, upstream = _cpu(row), _cpu(row, "upstream_cpu_ms_per_request")
    return None if gateway is None or not upstream else round(gateway / upstream, 2)


def _per_recording_pair(
    rows: Sequence[Row], figure: Callable[[Row | None, Row | None], T]
) -> dict[str, dict[str, T]]:
    """``figure(off, on)`` per recording path (by the path without recording) and mode."""
    return {
        spec.recording_of: {
            mode: figure(find(rows, spec.recording_of, mode), find(rows, name, mode))
            for mode in RECORDING_MODES
        }
        for name, spec in SYSTEM_SPECS.items()
        if spec.recording_of is not None
    }


def recording_cost_us(off: Row | None, on: Row | None) -> dict[str, float | None]:
    """What recording adds to a request's CPU, same run, in us: in the serving process (the
    draft, its pickling and the pipe, and what the slower loop costs) and in its writer child
    (the recording system's process tree minus its serving process)."""
    proc_off = _cpu(off, "server_process_cpu_ms_per_request")
    proc_on = _cpu(on, "server_process_cpu_ms_per_request")
    tree_on = _cpu(on)
    serving = None if proc_off is None or proc_on is None else round((proc_on - proc_off) * 1000)
    writer = None if tree_on is None or proc_on is None else round((tree_on - proc_on) * 1000)
    return {"serving_process": serving, "writer_process": writer}


def _added_us(base: Row | None, with_it: Row | None) -> float | None:
    a, b = _cpu(base), _cpu(with_it)
    return None if a is None or b is None else round((b - a) * 1000, 1)


def cpu_us_per_extra_chunk(rows: Sequence[Row], system: str) -> float | None:
    short, long = find(rows, system, "stream"), find(rows, system, "stream_long")
    cpu_short, cpu_long = _cpu(short), _cpu(long)
    if short is None or long is None or cpu_short is None or cpu_long is None:
        return None
    events_short, events_long = short.get("events_per_answer"), long.get("events_per_answer")
    if events_short is None or events_long is None:
        return None
    extra = float(events_long) - float(events_short)
    if extra <= 0:
        return None
    return round((cpu_long - cpu_short) * 1000 / extra, 2)


def headline(
    rows: Sequence[Row],
    startup_s: Mapping[ServerName, float] | None = None,
    memory: Mapping[str, Memory] | None = None,
    rounds: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    added_ttft: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The headline figures (module docstring); a figure not measured is None. ``rounds``: the
    extra recording on/off ratios per path and mode (:func:`~loadtests.bench.gateway.cells.
    measure_recording_rounds`); ``added_ttft``: :func:`~loadtests.bench.gateway.cells.
    measure_added_ttft`'s figures."""
    rounds = rounds or {}
    gw = find(rows, "switchyard")
    litellm_stream = find(rows, "litellm", "stream")
    startup_s = startup_s or {}
    memory = memory or {}
    systems = list(dict.fromkeys(str(r["system"]) for r in rows))
    return {
        "gateway_cpu_ms_per_request": gw.get("server_cpu_ms_per_request") if gw else None,
        "added_p50_ms": gw.get("added_p50_ms") if gw else None,
        "throughput_ratio_vs_litellm": _ratio(gw, find(rows, "litellm")),
        "recording_on_off_throughput_ratio": _ratio(find(rows, "switchyard_rec"), gw),
        "frontier_cpu_ms_per_request": {
            wire: {mode: _cpu(find(rows, system, mode)) for mode in ("unary", "stream")}
            for wire, system in FRONTIER_SYSTEMS.items()
        },
        "frontier_cpu_vs_upstream": {
            wire: {mode: _cpu_vs_upstream(find(rows, system, mode)) for mode in RECORDING_MODES}
            for wire, system in FRONTIER_SYSTEMS.items()
        },
        "cpu_us_per_extra_chunk": {s: cpu_us_per_extra_chunk(rows, s) for s in systems},
        "frontier_stream_vs_litellm": {
            wire: _ratio(find(rows, system, "stream"), litellm_stream)
            for wire, system in FRONTIER_SYSTEMS.items()
        },
        "translated_cpu_ms_per_request": {
            path: {mode: _cpu(find(rows, system, mode)) for mode in ("unary", "stream")}
            for path, system in TRANSLATED_SYSTEMS.items()
        },
        "translated_stream_vs_litellm": {
            path: _ratio(find(rows, system, "stream"), litellm_stream)
            for path, system in TRANSLATED_SYSTEMS.items()
        },
        "secrets_redact_cpu_ms_per_request": {
            mode: _cpu(find(rows, SECRETS_SYSTEM, mode)) for mode in RECORDING_MODES
        },
        "secrets_redact_cpu_added_us": {
            mode: _added_us(
                find(rows, "frontier_openai_rec", mode), find(rows, SECRETS_SYSTEM, mode)
            )
            for mode in RECORDING_MODES
        },
        "recording_on_off": {
            spec.recording_of: {
                mode: _median_ratio(
                    _ratio(find(rows, name, mode), find(rows, spec.recording_of, mode)),
                    rounds.get(spec.recording_of, {}).get(mode, []),
                )
                for mode in RECORDING_MODES
            }
            for name, spec in SYSTEM_SPECS.items()
            if spec.recording_of is not None
        },
        "recording_on_off_rounds": {
            base: {mode: [round(r, 3) for r in ratios] for mode, ratios in by_mode.items()}
            for base, by_mode in rounds.items()
        },
        "recording_on_off_cpu": _per_recording_pair(rows, _cpu_ratio),
        "recording_cost_us_per_request": _per_recording_pair(rows, recording_cost_us),
        "added_ttft_ms": dict(added_ttft or {}),
        "time_to_ready_s": {
            s: round(startup_s[s], 3) if s in startup_s else None for s in GATEWAY_SERVERS
        },
        "rss_mb": {s: round(memory[s].rss_mb, 1) if s in memory else None for s in GATEWAY_SERVERS},
        "peak_rss_mb": {
            s: round(memory[s].peak_rss_mb, 1) if s in memory else None for s in GATEWAY_SERVERS
        },
    }


def disturbed_cells(rows: Sequence[Row]) -> list[str]:
    """The cells in which other processes took more than :data:`SHARED_MACHINE_PERCENT`."""
    return [
        f"{r['system']} {r['mode']} c={r['concurrency']} ({r['other_cpu_percent']:.0f}%)"
        for r in rows
        if (r.get("other_cpu_percent") or 0.0) > SHARED_MACHINE_PERCENT
    ]


def _lookup(figures: Mapping[str, Any], dotted: str) -> float | None:
    value: Any = figures
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return None if value is None else float(value)


def check_targets(figures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each target with its value and ``pass`` (None when the figure was not measured)."""
    out: list[dict[str, Any]] = []
    for target in TARGETS:
        value = _lookup(figures, target.figure)
        passed = None
        if value is not None:
            passed = value <= target.limit if target.at_most else value >= target.limit
        out.append(
            {
                "figure": target.figure,
                "value": value,
                "target": f"{'<=' if target.at_most else '>='} {target.limit:g} {target.unit}",
                "pass": passed,
            }
        )
    return out


def targets_summary(checked: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    return {
        "passed": sum(1 for t in checked if t["pass"] is True),
        "failed": sum(1 for t in checked if t["pass"] is False),
        "not_measured": sum(1 for t in checked if t["pass"] is None),
    }
