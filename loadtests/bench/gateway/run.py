"""``make bench-gateway``: what Switchyard adds on top of its upstream, on its local and frontier
paths, against the LiteLLM proxy.

    python -m loadtests.bench.gateway                 # full: concurrency 1, 16, 64
    BENCH_QUICK=1 python -m loadtests.bench.gateway   # fewer cells, shorter windows
    python -m loadtests.bench.gateway --profile 10    # also py-spy a gateway under load

One run, on the same load (a short prompt; non-streamed answers of 16 tokens, streamed answers
of 16 and of 256 tokens), against the frontier simulator directly (OpenAI chat and Anthropic
Messages formats), Switchyard's local path (a ``vllm`` backend) and its frontier path
(``litellm`` backends: an OpenAI-format upstream through ``/v1/chat/completions``, an
Anthropic-format one through the Anthropic door ``/v1/messages``), each with recording off and
on (SQLite), and the LiteLLM proxy (OpenAI format). The systems are listed in
:mod:`~loadtests.bench.gateway.settings`; the servers start one at a time
(:mod:`~loadtests.bench.gateway.systems`), so each gateway's time to ready is its own; each
cell's load comes from a fresh load-generator process (:mod:`~loadtests.bench.gateway.cells`).
Then the added time to first byte at concurrency 1, each gateway path interleaved with the
direct simulator (:mod:`~loadtests.bench.gateway.ttft`). After the load: each server's resident
memory, the traffic store's write throughput (SQLite
and PostgreSQL, :mod:`loadtests.bench.store`), and what counting a prompt's tokens before the
call costs a request (:mod:`loadtests.bench.token_count`, ``token_counting`` in the JSON), and
what finding a request's secrets costs it (:mod:`loadtests.bench.secret_scan`,
``secret_scanning``).

Output: a table of cells and one of targets on stdout; under ``.cache/bench/gateway/``:
``report.json``, ``cells.csv``, ``chart.png``, the servers' configs and logs and, with
``--profile``, ``profile.raw.txt`` (py-spy's samples); and as the LAST line of stdout one JSON
object: the headline figures and their targets (:mod:`~loadtests.bench.gateway.figures`) and
every cell. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console

from loadtests.bench import secret_scan, store, token_count
from loadtests.bench.gateway import chart, figures, litellm_proxy, profile, report
from loadtests.bench.gateway.cells import (
    cell_spec,
    measure_added_ttft,
    measure_cells,
    measure_recording_rounds,
)
from loadtests.bench.gateway.settings import (
    HEADLINE_CONCURRENCY,
    HEADLINE_MODE,
    SYSTEM_SPECS,
    BenchSettings,
    ServerName,
    quick_settings,
)
from loadtests.bench.gateway.systems import (
    PROJECT_ROOT,
    Systems,
    recorded_rows,
    server_memory,
    settle,
    start_systems,
)
from loadtests.bench.servers import ServerFleet
from serving.processes import Interrupted, stop_on_signals

__all__ = ["PROJECT_ROOT", "main", "parse_args", "run"]


# -- settings ------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> BenchSettings:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.gateway", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="short run (also BENCH_QUICK=1)")
    parser.add_argument("--concurrency", help="comma-separated, e.g. 1,16,64 (every mode)")
    parser.add_argument("--duration", type=float, help="measured seconds per cell")
    parser.add_argument("--warmup", type=int, help="uncounted requests per cell")
    parser.add_argument("--systems", help=f"comma-separated: {','.join(SYSTEM_SPECS)}")
    parser.add_argument("--modes", help="comma-separated: unary,stream,stream_long")
    parser.add_argument("--store-records", type=int, help="records per store backend (0: skip)")
    parser.add_argument("--store-backends", help="comma-separated: sqlite,postgres")
    parser.add_argument("--out-dir", type=Path, help="where reports go")
    parser.add_argument(
        "--profile", type=float, metavar="SECONDS", help="py-spy a gateway under load (SECONDS)"
    )
    parser.add_argument("--profile-system", help="whose gateway --profile records (switchyard)")
    parser.add_argument("--profile-mode", help="under which load --profile records (unary)")
    parser.add_argument("--ttft-rounds", type=int, help="rounds of the added-TTFT rotation")
    parser.add_argument(
        "--ready-samples", type=int, help="starts per gateway; its time to ready is the median"
    )
    args = parser.parse_args(argv)
    overrides: dict[str, object] = {}
    if args.concurrency:
        overrides["concurrencies"] = tuple(int(c) for c in args.concurrency.split(","))
        overrides["long_stream_concurrencies"] = None
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
        ("profile_system", args.profile_system),
        ("profile_mode", args.profile_mode),
        ("ready_samples", args.ready_samples),
        ("ttft_rounds", args.ttft_rounds),
    ):
        if value is not None:
            overrides[name] = value
    quick = args.quick or os.environ.get("BENCH_QUICK", "") not in ("", "0")
    try:
        if quick:
            return quick_settings(**overrides)
        return dataclasses.replace(BenchSettings(), **overrides)  # type: ignore[arg-type]
    except ValueError as exc:
        parser.error(str(exc))


# -- profile -------------------------------------------------------------------------------
def profile_gateway(
    settings: BenchSettings, systems: Systems, out_dir: Path, log: Console
) -> tuple[dict[str, profile.ProfileSummary] | None, str | None]:
    """py-spy ``settings.profile_system``'s gateway under ``settings.profile_mode`` load at the
    headline concurrency (see :mod:`loadtests.bench.gateway.profile`); the raw samples go to
    ``profile.raw.txt``."""
    if settings.profile_s <= 0:
        return None, "not asked (--profile SECONDS)"
    system = settings.profile_system
    gateway = systems.server_for(system)
    if gateway is None:
        return None, f"the {system} gateway did not start"
    if profile.pyspy_executable() is None:
        return None, "py-spy not installed (.venv/bin/pip install py-spy)"
    spec = dataclasses.replace(
        cell_spec(settings, systems, system, settings.profile_mode, HEADLINE_CONCURRENCY),
        duration_s=2 * (settings.profile_s + 2) + 4,  # room for the fallback recording
    )
    argv = [sys.executable, "-m", "loadtests.bench.gateway.loadgen", json.dumps(asdict(spec))]
    raw_path = out_dir / "profile.raw.txt"
    log.print(f"profiling {system} (pid {gateway.pid}) for {settings.profile_s:.0f}s ...")
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
def _notes(
    rows: list[dict[str, Any]], systems: Systems, recorded: Mapping[ServerName, int | None]
) -> list[str]:
    notes: list[str] = []
    failed = [r for r in rows if r.get("errors")]
    if failed:
        first = failed[0]
        notes.append(
            f"{len(failed)} cells had errors; first: {first['system']} {first['mode']} "
            f"c={first['concurrency']}: {first['error_sample']}"
        )
    disturbed = figures.disturbed_cells(rows)
    if disturbed:
        notes.append(
            f"{len(disturbed)} of {len(rows)} cells shared the machine with other processes "
            f"(> {figures.SHARED_MACHINE_PERCENT:g}% of all cores; column `other CPU %`): their "
            "req/s and the ratios built on them are not trustworthy (CPU per request holds "
            f"better); rerun on a quiet machine. {', '.join(disturbed[:12])}"
        )
    for server, rows_written in recorded.items():
        if server in systems.servers and not rows_written:
            notes.append(
                f"{server} (recording on) wrote no rows to its SQLite file, so its cells "
                "measure no store work"
            )
    notes.append(
        "the LiteLLM proxy is measured in the OpenAI format only; "
        "frontier_stream_vs_litellm.anthropic compares across formats"
    )
    return notes


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
        systems = start_systems(fleet, settings, out_dir, proxy_exe, log.print)
        if install_error is not None:
            systems.unavailable["litellm"] = install_error.splitlines()[0]
        idle, settle_s = settle(systems.servers)
        cells = measure_cells(settings, systems, log.print)
        rounds = measure_recording_rounds(settings, systems, log.print)
        log.print("added time to first byte at c=1, interleaved with the direct path ...")
        added_ttft = measure_added_ttft(settings, systems, log.print)
        prof, prof_reason = profile_gateway(settings, systems, out_dir, log)
        memory = server_memory(systems.servers)  # after every cell: the load's high-water mark
    recorded = {name: recorded_rows(db) for name, db in systems.recording_dbs.items()}
    stores: dict[str, store.StoreFigure] = {}
    if settings.store_records > 0:
        log.print(f"store write throughput: {settings.store_records} records per backend ...")
        stores = store.run(
            settings.store_backends, settings.store_records, settings.postgres_url, out_dir
        )
    log.print("token counting: CPU per request, in this process ...")
    counting = token_count.measure(settings.quick)
    log.print("secret scanning: CPU per request, in this process ...")
    scanning = secret_scan.measure(settings.quick)
    rows = report.build_rows(cells)
    headline = figures.headline(rows, systems.startup_s, memory, rounds, added_ttft)
    checked = figures.check_targets(headline)
    summary: dict[str, Any] = {
        **headline,
        "targets": checked,
        "targets_summary": figures.targets_summary(checked),
        "disturbed_cells": figures.disturbed_cells(rows),
        **report.store_section(stores),
        "token_counting": counting,  # loadtests.bench.token_count
        "secret_scanning": scanning,  # loadtests.bench.secret_scan
        "headline_cell": {"mode": HEADLINE_MODE, "concurrency": HEADLINE_CONCURRENCY},
        "quick": settings.quick,
        "elapsed_s": round(time.monotonic() - started, 1),
        "settings": {
            "concurrencies": list(settings.concurrencies),
            "long_stream_concurrencies": list(settings.concurrencies_for("stream_long")),
            "modes": list(settings.modes),
            "duration_s": settings.duration_s,
            "warmup_requests": settings.warmup_requests,
            "max_tokens": settings.max_tokens,
            "long_stream_tokens": settings.long_stream_tokens,
            "ttft_tokens": settings.ttft_tokens,
            "ttft_rounds": settings.ttft_rounds,
            "store_records": settings.store_records,
        },
        "unavailable": dict(systems.unavailable),
        "startup_s": {k: round(v, 3) for k, v in systems.startup_s.items()},
        "startup_samples_s": {
            k: [round(t, 3) for t in v] for k, v in systems.startup_samples_s.items()
        },
        "startup_settle_s": dict(systems.startup_settle_s),
        "memory_mb": {
            k: {"rss_mb": round(v.rss_mb, 1), "peak_rss_mb": round(v.peak_rss_mb, 1)}
            for k, v in memory.items()
        },
        "idle_cpu_percent": idle,
        "settle_s": settle_s,
        "recording_rows": recorded,
        "notes": _notes(rows, systems, recorded),
        "cells": rows,
        **report.profile_section(prof, prof_reason),
    }
    files = {
        "json": report.write_json(out_dir / "report.json", summary),
        "csv": report.write_csv(out_dir / "cells.csv", rows),
        "chart": chart.write_chart(out_dir / "chart.png", rows),
    }
    summary["report_files"] = {k: str(v) for k, v in files.items()}
    report.write_json(out_dir / "report.json", summary)
    report.print_table(stdout, rows)
    report.print_targets(stdout, checked)
    if prof is not None:
        report.print_profile(stdout, prof)
    return summary


def main(argv: list[str] | None = None) -> None:
    # First: SIGTERM and SIGINT alike unwind through the fleet's teardown (SIGINT too when a
    # shell started us in the background with it ignored).
    with stop_on_signals():
        settings = parse_args(argv)
        stdout = Console(width=180)
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
