"""The gateway benchmark's own plumbing, on tiny settings; never a timing assertion."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench import profile, report
from loadtests.bench.loadgen import CellResult, Percentiles, percentile
from loadtests.bench.settings import HEADLINE_CONCURRENCY, BenchSettings
from loadtests.bench_gateway import PROJECT_ROOT, parse_args

HEADLINE_FIELDS = (
    "gateway_cpu_ms_per_request",
    "added_p50_ms",
    "throughput_ratio_vs_litellm",
    "recording_on_off_throughput_ratio",
    "store_write_records_per_s",
)
CELL_FIELDS = (
    "system",
    "mode",
    "concurrency",
    "requests",
    "errors",
    "rps",
    "p50_ms",
    "p99_ms",
    "ttfb_p50_ms",
    "added_p50_ms",
    "server_cpu_ms_per_request",
)


def test_percentile_interpolates_between_ranks():
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 90) == pytest.approx(9.0)


def test_quick_mode_keeps_every_system(monkeypatch):
    monkeypatch.setenv("BENCH_QUICK", "1")
    settings = parse_args([])
    assert settings.quick
    assert set(settings.systems) == set(BenchSettings().systems)
    assert HEADLINE_CONCURRENCY in settings.concurrencies
    monkeypatch.delenv("BENCH_QUICK")
    assert parse_args(["--concurrency", "2,4"]).concurrencies == (2, 4)


def _result(rps: float, p50: float, cpu_ms: float, requests: int = 100) -> CellResult:
    lat = Percentiles(p50=p50, p90=p50, p99=p50 * 2, mean=p50, max=p50 * 3)
    return CellResult(
        requests=requests,
        errors=0,
        error_sample=None,
        elapsed_s=requests / rps,
        rps=rps,
        latency_ms=lat,
        ttfb_ms=None,
        cpu_ms={"server": cpu_ms, "upstream": 10.0},
        client_cpu_ms=20.0,
    )


def test_headline_figures_come_from_the_same_run():
    conc = HEADLINE_CONCURRENCY
    cells = [
        report.Cell("direct", "unary", conc, _result(2000, 5.0, 20.0)),
        report.Cell("switchyard", "unary", conc, _result(1000, 7.5, 50.0)),
        report.Cell("switchyard_rec", "unary", conc, _result(800, 8.0, 60.0)),
        report.Cell("litellm", "unary", conc, _result(50, 300.0, 1000.0)),
        report.Cell("litellm", "stream", conc, None, "not started"),
    ]
    rows = report.build_rows(cells)
    figures = report.headline(rows)
    assert figures["gateway_cpu_ms_per_request"] == pytest.approx(0.5)
    assert figures["added_p50_ms"] == pytest.approx(2.5)
    assert figures["throughput_ratio_vs_litellm"] == pytest.approx(20.0)
    assert figures["recording_on_off_throughput_ratio"] == pytest.approx(0.8)
    assert rows[-1]["reason"] == "not started"


def test_profile_summary_keeps_busy_main_thread_samples():
    raw = "\n".join(
        [
            "thread (1): MainThread;main (gateway/serve.py:74);"
            "_handle (gateway/api_openai.py:102);write (libc.so.6) 6",
            "thread (1): MainThread;main (gateway/serve.py:74);"
            "send (uvicorn/protocols/http/httptools_impl.py:524);"
            "gc_collect_main (libpython3.11.so) 4",
            "thread (1): MainThread;main (gateway/serve.py:74);epoll_pwait (libc.so.6) 90",
            "thread (2): asyncio_0;_worker (concurrent/futures/thread.py:81) 50",
        ]
    )
    native = profile.summarize(raw, "native")
    assert (native.total_samples, native.idle_samples, native.other_thread_samples) == (10, 90, 50)
    assert native.gc_percent == pytest.approx(40.0)
    assert native.top_self[0].package == "libc"
    python = profile.summarize(raw, "python")
    packages = {spot.package: spot.percent for spot in python.by_package}
    assert packages == {"switchyard": pytest.approx(60.0), "uvicorn": pytest.approx(40.0)}


def test_benchmark_end_to_end_on_tiny_settings(tmp_path: Path):
    """Simulator, gateway with recording on and off, SQLite store; the summary's shape only."""
    out = tmp_path / "bench"
    argv = [
        sys.executable,
        "-m",
        "loadtests.bench_gateway",
        "--systems",
        "direct,switchyard,switchyard_rec",
        "--concurrency",
        f"1,{HEADLINE_CONCURRENCY}",
        "--duration",
        "0.3",
        "--warmup",
        "2",
        "--store-records",
        "50",
        "--store-backends",
        "sqlite",
        "--out-dir",
        str(out),
    ]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=300, cwd=PROJECT_ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    for name in HEADLINE_FIELDS:
        assert name in summary
    assert summary["throughput_ratio_vs_litellm"] is None  # LiteLLM was not asked for
    assert summary["gateway_cpu_ms_per_request"] is not None
    assert summary["recording_on_off_throughput_ratio"] is not None
    assert summary["store_write_records_per_s"]["sqlite"] is not None
    cells = summary["cells"]
    assert len(cells) == 3 * 2 * 2
    for cell in cells:
        for name in CELL_FIELDS:
            assert name in cell, (name, cell)
        assert cell["requests"] > 0 and cell["errors"] == 0, cell
    streamed = [c for c in cells if c["mode"] == "stream"]
    assert all(c["ttfb_p50_ms"] is not None for c in streamed)
    for name in ("report.json", "cells.csv", "chart.png"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "report.json").read_text())["cells"] == cells
