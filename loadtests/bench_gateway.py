"""Gateway benchmark: what Switchyard adds on top of its upstream, against the LiteLLM proxy.

    python -m loadtests.bench_gateway            # full: concurrency 1, 16, 64
    BENCH_QUICK=1 python -m loadtests.bench_gateway   # < 2 minutes once LiteLLM is installed
    python -m loadtests.bench_gateway --profile 10    # also py-spy the gateway under load

One run, on the same load (non-streamed and streamed chat completions, a short prompt, 16-token
answers), against (a) the frontier simulator directly, (b) Switchyard's local path in front of
it with recording off, (b') the same with recording on (SQLite), (c) the LiteLLM proxy in front
of it. Every server is a subprocess on a free loopback port; each cell's load comes from a fresh
load-generator process (:mod:`loadtests.bench.loadgen`). Cells run in the order mode ->
concurrency -> system, so the systems compared in one cell were measured minutes apart at most.
Then the traffic store's write throughput (SQLite and PostgreSQL, :mod:`~loadtests.bench.
store_throughput`).

Output: a table on stdout; under ``.cache/bench/gateway/``: ``report.json``, ``cells.csv``,
``chart.png``, the servers' logs and, with ``--profile``, ``profile.raw.txt`` (py-spy's
samples); and as the LAST line of stdout one JSON object: the headline
figures (see :mod:`loadtests.bench.report`) and every cell. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from loadtests.bench import litellm_proxy, profile, report, store_throughput
from loadtests.bench.loadgen import CellResult, CellSpec, result_from_json, tree_cpu_s
from loadtests.bench.servers import Server, ServerFleet, ServerStartError, free_port
from loadtests.bench.settings import (
    HEADLINE_CONCURRENCY,
    HEADLINE_MODE,
    MODEL_NAME,
    BenchSettings,
    SystemName,
    quick_settings,
)
from serving.processes import Interrupted, stop_on_signals

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CHAT_PATH = "/v1/chat/completions"
BASE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
IDLE_SAMPLE_S = 1.0


@dataclasses.dataclass(slots=True)
class Systems:
    """The servers that started (by system), and why the others did not."""

    simulator: Server
    servers: dict[SystemName, Server] = dataclasses.field(default_factory=dict)
    unavailable: dict[SystemName, str] = dataclasses.field(default_factory=dict)
    startup_s: dict[str, float] = dataclasses.field(default_factory=dict)
    recording_db: Path | None = None

    def headers(self, system: SystemName) -> dict[str, str]:
        return litellm_proxy.auth_headers() if system == "litellm" else {}


# -- settings ------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> BenchSettings:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench_gateway", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (also BENCH_QUICK=1)")
    parser.add_argument("--concurrency", help="comma-separated, e.g. 1,16,64")
    parser.add_argument("--duration", type=float, help="measured seconds per cell")
    parser.add_argument("--warmup", type=int, help="uncounted requests per cell")
    parser.add_argument(
        "--systems", help="comma-separated: direct,switchyard,switchyard_rec,litellm"
    )
    parser.add_argument("--modes", help="comma-separated: unary,stream")
    parser.add_argument("--store-records", type=int, help="records per store backend (0: skip)")
    parser.add_argument("--store-backends", help="comma-separated: sqlite,postgres")
    parser.add_argument("--out-dir", type=Path, help="where reports go")
    parser.add_argument(
        "--profile", type=float, metavar="SECONDS", help="py-spy the gateway under load (SECONDS)"
    )
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {}
    if args.concurrency:
        overrides["concurrencies"] = tuple(int(c) for c in args.concurrency.split(","))
    if args.systems:
        overrides["systems"] = tuple(s.strip() for s in args.systems.split(","))
    if args.modes:
        overrides["modes"] = tuple(m.strip() for m in args.modes.split(","))
    if args.store_backends:
        overrides["store_backends"] = tuple(b.strip() for b in args.store_backends.split(","))
    for name, value in (
        ("duration_s", args.duration),
        ("warmup_requests", args.warmup),
        ("store_records", args.store_records),
        ("out_dir", args.out_dir),
        ("profile_s", args.profile),
    ):
        if value is not None:
            overrides[name] = value
    quick = args.quick or os.environ.get("BENCH_QUICK", "") not in ("", "0")
    if quick:
        return quick_settings(**overrides)
    return dataclasses.replace(BenchSettings(), **overrides)  # type: ignore[arg-type]


# -- servers -------------------------------------------------------------------------------
def gateway_config(sim_url: str, store: Mapping[str, Any]) -> dict[str, Any]:
    """The local path only. API keys off: they need the store, and the recording-off system
    has none; the load carries no key to any Switchyard system (LiteLLM checks its master key)."""
    return {
        "backends": {"local": {"kind": "vllm", "model": MODEL_NAME, "replicas": [sim_url]}},
        "routing": {"default": "local", "aliases": {MODEL_NAME: "local"}},
        "store": dict(store),
        "auth": {"required": False},
    }


def _spawn_gateway(
    fleet: ServerFleet, name: str, out_dir: Path, sim_url: str, store: Mapping[str, Any]
) -> Server:
    config_path = out_dir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(gateway_config(sim_url, store), sort_keys=False))
    port = free_port()
    argv = [sys.executable, "-m", "gateway", "--config", str(config_path), "--port", str(port)]
    return fleet.spawn(name, argv, port, "/ready", env=BASE_ENV, cwd=PROJECT_ROOT)


def start_systems(
    fleet: ServerFleet, settings: BenchSettings, out_dir: Path, proxy_exe: Path | None, log: Console
) -> Systems:
    """The simulator first (the others probe it), then every other system in parallel."""
    sim_port = free_port()
    sim = fleet.spawn(
        "simulator",
        [
            sys.executable,
            "-m",
            "loadtests.frontier_sim",
            "--host",
            "127.0.0.1",
            "--port",
            str(sim_port),
        ],
        sim_port,
        "/health",
        env=BASE_ENV,
        cwd=PROJECT_ROOT,
    )
    systems = Systems(simulator=sim)
    systems.startup_s["simulator"] = fleet.wait_ready(sim, settings.startup_timeout_s)
    pending: dict[SystemName, Server] = {}
    if "direct" in settings.systems:
        systems.servers["direct"] = sim
    if "switchyard" in settings.systems:
        pending["switchyard"] = _spawn_gateway(
            fleet, "switchyard", out_dir, sim.base_url, {"enabled": False}
        )
    if "switchyard_rec" in settings.systems:
        db = out_dir / "recording.db"
        spool = out_dir / "spool-recording"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(spool, ignore_errors=True)
        systems.recording_db = db
        store = {"enabled": True, "url": f"sqlite:///{db.resolve()}", "spool_dir": str(spool)}
        pending["switchyard_rec"] = _spawn_gateway(
            fleet, "switchyard_rec", out_dir, sim.base_url, store
        )
    if "litellm" in settings.systems:
        if proxy_exe is None:
            systems.unavailable["litellm"] = "LiteLLM proxy not installed (see the log above)"
        else:
            cfg = litellm_proxy.write_config(out_dir / "litellm.yaml", sim.base_url)
            port = free_port()
            pending["litellm"] = fleet.spawn(
                "litellm",
                litellm_proxy.command(proxy_exe, cfg, port),
                port,
                litellm_proxy.READY_PATH,
                env={**BASE_ENV, **litellm_proxy.ENV},
                cwd=out_dir,
            )
    for system, server in pending.items():
        try:
            systems.startup_s[system] = fleet.wait_ready(server, settings.startup_timeout_s)
        except ServerStartError as exc:
            log.print(f"[red]{system} did not start[/red]: {exc}")
            systems.unavailable[system] = str(exc).splitlines()[0]
            fleet.remove(server)
            continue
        systems.servers[system] = server
        log.print(f"{system} ready in {systems.startup_s[system]:.1f}s on {server.base_url}")
    return systems


def idle_cpu_percent(servers: Mapping[SystemName, Server]) -> dict[str, float]:
    """CPU each server burns while nobody calls it (background tasks would skew the cells)."""
    before = {name: tree_cpu_s(s.pid) for name, s in servers.items()}
    time.sleep(IDLE_SAMPLE_S)
    return {
        name: round(100 * (tree_cpu_s(s.pid) - before[name]) / IDLE_SAMPLE_S, 2)
        for name, s in servers.items()
    }


# -- cells ---------------------------------------------------------------------------------
def run_loadgen(spec: CellSpec, timeout_s: float) -> CellResult:
    argv = [sys.executable, "-m", "loadtests.bench.loadgen", json.dumps(asdict(spec))]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout_s, cwd=PROJECT_ROOT, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"load generator failed ({done.returncode}): {done.stderr[-2000:]}")
    data: dict[str, object] = json.loads(lines[-1])
    return result_from_json(data)


def cell_spec(
    settings: BenchSettings, systems: Systems, system: SystemName, stream: bool, concurrency: int
) -> CellSpec:
    server = systems.servers[system]
    watch = {"server": server.pid}
    if server is not systems.simulator:
        watch["upstream"] = systems.simulator.pid
    return CellSpec(
        url=server.base_url + CHAT_PATH,
        concurrency=concurrency,
        duration_s=settings.duration_s,
        warmup=settings.warmup_for(concurrency),
        max_requests=settings.max_requests_per_cell,
        stream=stream,
        max_tokens=settings.max_tokens,
        model=MODEL_NAME,
        headers=systems.headers(system),
        watch_pids=watch,
    )


def measure_cells(settings: BenchSettings, systems: Systems, log: Console) -> list[report.Cell]:
    cells: list[report.Cell] = []
    timeout = settings.duration_s + settings.cell_timeout_margin_s
    for mode in settings.modes:
        for conc in settings.concurrencies:
            for system in settings.systems:
                if system not in systems.servers:
                    reason = systems.unavailable.get(system, "not started")
                    cells.append(report.Cell(system, mode, conc, None, reason))
                    continue
                spec = cell_spec(settings, systems, system, mode == "stream", conc)
                try:
                    result = run_loadgen(spec, timeout)
                except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                    log.print(f"[red]{system} {mode} c={conc} failed[/red]: {exc}")
                    cells.append(report.Cell(system, mode, conc, None, str(exc)[:300]))
                    continue
                cells.append(report.Cell(system, mode, conc, result))
                p50 = result.latency_ms.p50 if result.latency_ms else float("nan")
                log.print(
                    f"  {mode:6} c={conc:<3} {system:15} {result.rps:8.0f} req/s  "
                    f"p50 {p50:7.2f} ms  errors {result.errors}"
                )
    return cells


def recorded_rows(db: Path | None) -> int | None:
    if db is None or not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (count,) = conn.execute("SELECT count(*) FROM inference").fetchone()
            return int(count)
    except sqlite3.Error:
        return 0


# -- profile -------------------------------------------------------------------------------
def profile_gateway(
    settings: BenchSettings, systems: Systems, out_dir: Path, log: Console
) -> tuple[dict[str, profile.ProfileSummary] | None, str | None]:
    """py-spy the recording-off gateway under non-streamed load at the headline concurrency
    (see :mod:`loadtests.bench.profile`); the raw samples go to ``profile.raw.txt``."""
    if settings.profile_s <= 0:
        return None, "not asked (--profile SECONDS)"
    if "switchyard" not in systems.servers:
        return None, "the switchyard gateway did not start"
    if profile.pyspy_executable() is None:
        return None, "py-spy not installed (.venv/bin/pip install py-spy)"
    gateway = systems.servers["switchyard"]
    spec = dataclasses.replace(
        cell_spec(settings, systems, "switchyard", False, HEADLINE_CONCURRENCY),
        duration_s=2 * (settings.profile_s + 2) + 4,  # room for the fallback recording
    )
    argv = [sys.executable, "-m", "loadtests.bench.loadgen", json.dumps(asdict(spec))]
    raw_path = out_dir / "profile.raw.txt"
    log.print(f"profiling the gateway (pid {gateway.pid}) for {settings.profile_s:.0f}s ...")
    load = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    error = ""
    try:
        time.sleep(1.5)  # the generator's start-up and warm-up
        for flags in (profile.RECORD_FLAGS, profile.FALLBACK_FLAGS):
            recorder = profile.start_recording(gateway.pid, settings.profile_s, raw_path, flags)
            if recorder is None:
                return None, "py-spy not installed"
            try:
                _, err = recorder.communicate(timeout=settings.profile_s + 60)
            finally:
                recorder.kill()  # interrupted or timed out: it must not outlive us
                recorder.wait()
            if recorder.returncode == 0:
                break
            error = err.decode(errors="replace")[-500:]
            log.print(f"[yellow]py-spy {' '.join(flags)} failed[/yellow]: {error}")
        else:
            return None, f"py-spy failed: {error}"
    finally:
        load.kill()
        load.wait()
    raw = raw_path.read_text()
    return {view: profile.summarize(raw, view) for view in profile.VIEWS}, None


# -- main ----------------------------------------------------------------------------------
def run(settings: BenchSettings, stdout: Console, log: Console) -> dict[str, Any]:
    out_dir = (PROJECT_ROOT / settings.out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    proxy_exe: Path | None = None
    install_error: str | None = None
    if "litellm" in settings.systems:
        try:  # before the clock starts: installing is not part of the benchmark
            proxy_exe = litellm_proxy.ensure_installed(
                PROJECT_ROOT / settings.litellm_venv, log.print
            )
        except (litellm_proxy.ProxyInstallError, OSError) as exc:
            install_error = str(exc)
            log.print(f"[red]LiteLLM proxy unavailable[/red]: {exc}")
    started = time.monotonic()
    with ServerFleet(out_dir / "logs") as fleet:
        systems = start_systems(fleet, settings, out_dir, proxy_exe, log)
        if install_error is not None:
            systems.unavailable["litellm"] = install_error.splitlines()[0]
        idle = idle_cpu_percent(systems.servers)
        cells = measure_cells(settings, systems, log)
        prof, prof_reason = profile_gateway(settings, systems, out_dir, log)
    rows_recorded = recorded_rows(systems.recording_db)
    stores: dict[str, store_throughput.StoreFigure] = {}
    if settings.store_records > 0:
        log.print(f"store write throughput: {settings.store_records} records per backend ...")
        stores = store_throughput.run(
            settings.store_backends, settings.store_records, settings.postgres_url, out_dir
        )
    rows = report.build_rows(cells)
    notes: list[str] = []
    failed = [r for r in rows if r.get("errors")]
    if failed:
        first = failed[0]
        notes.append(
            f"{len(failed)} cells had errors; first: {first['system']} {first['mode']} "
            f"c={first['concurrency']}: {first['error_sample']}"
        )
    if "switchyard_rec" in systems.servers and not rows_recorded:
        notes.append(
            "recording on wrote no rows to its SQLite file: the gateway's recorder is not wired "
            "to the store yet (gateway/recording.py), so switchyard_rec measures no store work"
        )
    summary: dict[str, Any] = {
        **report.headline(rows),
        **report.store_section(stores),
        "headline_cell": {"mode": HEADLINE_MODE, "concurrency": HEADLINE_CONCURRENCY},
        "quick": settings.quick,
        "elapsed_s": round(time.monotonic() - started, 1),
        "settings": {
            "concurrencies": list(settings.concurrencies),
            "modes": list(settings.modes),
            "duration_s": settings.duration_s,
            "warmup_requests": settings.warmup_requests,
            "max_tokens": settings.max_tokens,
            "store_records": settings.store_records,
        },
        "unavailable": dict(systems.unavailable),
        "startup_s": {k: round(v, 1) for k, v in systems.startup_s.items()},
        "idle_cpu_percent": idle,
        "recording_rows": rows_recorded,
        "notes": notes,
        "cells": rows,
        **report.profile_section(prof, prof_reason),
    }
    files = {
        "json": report.write_json(out_dir / "report.json", summary),
        "csv": report.write_csv(out_dir / "cells.csv", rows),
        "chart": report.write_chart(out_dir / "chart.png", rows),
    }
    summary["report_files"] = {k: str(v) for k, v in files.items()}
    report.write_json(out_dir / "report.json", summary)
    report.print_table(stdout, rows)
    if prof is not None:
        report.print_profile(stdout, prof)
    return summary


def main(argv: list[str] | None = None) -> None:
    # First: SIGTERM and SIGINT alike unwind through the fleet's teardown (SIGINT too when a
    # shell started us in the background with it ignored).
    with stop_on_signals():
        settings = parse_args(argv)
        stdout = Console(width=160)
        log = Console(stderr=True, soft_wrap=True)
        try:
            summary = run(settings, stdout, log)
        except Interrupted as stop:
            log.print(f"[red]interrupted ({stop}); servers stopped[/red]")
            sys.exit(stop.exit_code)
    for note in summary["notes"]:
        log.print(f"[yellow]note[/yellow]: {note}")
    sys.stdout.write(json.dumps(summary, separators=(",", ":")) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
