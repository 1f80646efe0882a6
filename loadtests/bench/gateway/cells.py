"""The run's cells: what each asks of the load generator, and the loop that measures them.

Cells run in the order mode -> concurrency -> system, so the systems compared in one cell were
measured minutes apart at most. Each cell's load comes from a fresh load-generator process
(:mod:`loadtests.bench.gateway.loadgen`), which watches the CPU of the system's server tree
(``server``) and, for every system but the simulator itself, of the simulator (``upstream``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from loadtests.bench.gateway import ttft
from loadtests.bench.gateway.loadgen import CellResult, CellSpec, result_from_json
from loadtests.bench.gateway.report import Cell
from loadtests.bench.gateway.settings import (
    HEADLINE_CONCURRENCY,
    SYSTEM_SPECS,
    BenchSettings,
    Mode,
    SystemName,
)
from loadtests.bench.gateway.systems import PROJECT_ROOT, Systems


def run_loadgen(spec: CellSpec, timeout_s: float) -> CellResult:
    argv = [sys.executable, "-m", "loadtests.bench.gateway.loadgen", json.dumps(asdict(spec))]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, cwd=PROJECT_ROOT, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr[-2000:]}")
    data: dict[str, object] = json.loads(lines[-1])
    return result_from_json(data)


def cell_spec(
    settings: BenchSettings, systems: Systems, system: SystemName, mode: Mode, concurrency: int
) -> CellSpec:
    spec = SYSTEM_SPECS[system]
    server = systems.server_for(system)
    if server is None:
        raise ValueError(f"{system}: its server did not start")
    watch = {"server": server.pid}
    if server is not systems.simulator:
        watch["upstream"] = systems.simulator.pid
    return CellSpec(
        url=server.base_url + spec.url_path,
        concurrency=concurrency,
        duration_s=settings.duration_s,
        warmup=settings.warmup_for(concurrency),
        max_requests=settings.max_requests_per_cell,
        stream=mode != "unary",
        max_tokens=settings.tokens_for(mode),
        model=spec.model,
        wire=spec.wire,
        headers=systems.headers(system),
        watch_pids=watch,
        prompt=spec.prompt,
    )


def measure_cells(
    settings: BenchSettings, systems: Systems, say: Callable[[str], None]
) -> list[Cell]:
    cells: list[Cell] = []
    timeout = settings.duration_s + settings.cell_timeout_margin_s
    for mode in settings.modes:
        tokens = settings.tokens_for(mode)
        for conc in settings.concurrencies_for(mode):
            for system in settings.systems:
                if systems.server_for(system) is None:
                    cells.append(Cell(system, mode, conc, None, systems.why_not(system), tokens))
                    continue
                spec = cell_spec(settings, systems, system, mode, conc)
                try:
                    result = run_loadgen(spec, timeout)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    say(f"[red]{system} {mode} c={conc} failed[/red]: {exc}")
                    cells.append(Cell(system, mode, conc, None, str(exc)[:300], tokens))
                    continue
                cells.append(Cell(system, mode, conc, result, None, tokens))
                p50 = result.latency_ms.p50 if result.latency_ms else float("nan")
                cpu = result.cpu_ms.get("server", 0.0) / max(result.requests, 1)
                say(
                    f"  {mode:11} c={conc:<3} {system:22} {result.rps:8.0f} req/s  "
                    f"p50 {p50:7.2f} ms  CPU {cpu:6.3f} ms/req  errors {result.errors}"
                )
    return cells


def recording_first(round_no: int) -> bool:
    """Whether round ``round_no`` (from 0) measures the recording system first: every other
    round, starting with the first, since the main cells measure it second."""
    return round_no % 2 == 0


def measure_recording_rounds(
    settings: BenchSettings, systems: Systems, say: Callable[[str], None]
) -> dict[str, dict[str, list[float]]]:
    """Recording on / off req/s ratios from ``settings.recording_rounds`` extra pairs per path
    and mode at the headline concurrency, each pair run back to back, the order alternating:
    on then off in the first round, off then on in the next, and so on.

    Why pairs: one 3-5 s cell per system on a shared 2-core machine swings a ratio by +-30% when
    another process wakes up; pairs taken seconds apart and their median hold it. Why the order
    alternates: the main cells always run off before on (their system order), so every pair
    taken in one order measures the order too (what the previous cell left running: the
    recording gateway's writer finishing its batch, the simulator's buffers), and with the
    main cell's pair, an odd number of rounds leaves as many pairs in each order. The workload
    is the cells' own (same requests, concurrency and window)."""
    out: dict[str, dict[str, list[float]]] = {}
    timeout = settings.duration_s + settings.cell_timeout_margin_s
    for name, spec in SYSTEM_SPECS.items():
        base = spec.recording_of
        if base is None or name not in settings.systems or base not in settings.systems:
            continue
        if systems.server_for(name) is None or systems.server_for(base) is None:
            continue
        for mode in ("unary", "stream"):
            if mode not in settings.modes:
                continue
            ratios = out.setdefault(base, {}).setdefault(mode, [])
            for round_no in range(settings.recording_rounds):
                order = (name, base) if recording_first(round_no) else (base, name)
                try:
                    result = {
                        s: run_loadgen(
                            cell_spec(settings, systems, s, mode, HEADLINE_CONCURRENCY), timeout
                        )
                        for s in order
                    }
                    on, off = result[name], result[base]
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    say(f"[red]recording round {base} {mode} failed[/red]: {exc}")
                    continue
                if off.rps and on.rps and not off.errors and not on.errors:
                    ratios.append(on.rps / off.rps)
            say(
                f"  recording on/off {base:20} {mode:7} rounds: "
                + ", ".join(f"{r:.3f}" for r in ratios)
            )
    return out


def measure_added_ttft(
    settings: BenchSettings, systems: Systems, say: Callable[[str], None]
) -> dict[str, dict[str, Any]]:
    """Added time to first byte at concurrency 1 of every started system measured against a
    direct one (the gateway paths and the LiteLLM proxy), interleaved with it
    (:mod:`loadtests.bench.gateway.ttft`)."""
    cells: dict[str, CellSpec] = {}
    partner: dict[str, str] = {}
    for system in settings.systems:
        baseline = SYSTEM_SPECS[system].baseline
        if systems.server_for(system) is None:
            continue
        if system in ttft.DIRECT_SYSTEMS or baseline in ttft.DIRECT_SYSTEMS:
            spec = cell_spec(settings, systems, system, "stream", 1)
            cells[system] = replace(spec, max_tokens=settings.ttft_tokens, watch_pids={})
        if system not in ttft.DIRECT_SYSTEMS and baseline in ttft.DIRECT_SYSTEMS:
            partner[system] = baseline
    partner = {s: d for s, d in partner.items() if d in cells}
    if not partner:
        return {}
    rounds = settings.ttft_rounds + settings.ttft_warmup_rounds
    timeout = 60.0 + rounds * len(cells) * 0.05  # 50 ms a request: far above any seen
    return ttft.measure(
        cells, partner, settings.ttft_rounds, settings.ttft_warmup_rounds, timeout, say
    )
