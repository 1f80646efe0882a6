"""The gateway benchmark's own plumbing, on tiny settings; never a timing assertion."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests.bench.gateway import figures, profile, report, systems, ttft
from loadtests.bench.gateway.loadgen import (
    WIRES,
    CellResult,
    CellSpec,
    Percentiles,
    StreamWatch,
    percentile,
    request_body,
    request_headers,
)
from loadtests.bench.gateway.run import PROJECT_ROOT, parse_args
from loadtests.bench.gateway.settings import (
    HEADLINE_CONCURRENCY,
    BenchSettings,
    Mode,
    ServerName,
    SystemName,
)
from loadtests.bench.servers import Memory, Server

HEADLINE_FIELDS = (
    "gateway_cpu_ms_per_request",
    "added_p50_ms",
    "throughput_ratio_vs_litellm",
    "recording_on_off_throughput_ratio",
    "frontier_cpu_ms_per_request",
    "frontier_cpu_vs_upstream",
    "cpu_us_per_extra_chunk",
    "frontier_stream_vs_litellm",
    "recording_on_off",
    "added_ttft_ms",
    "time_to_ready_s",
    "rss_mb",
    "peak_rss_mb",
    "targets",
    "targets_summary",
    "disturbed_cells",
    "store_write_records_per_s",
)
CELL_FIELDS = (
    "system",
    "mode",
    "concurrency",
    "max_tokens",
    "requests",
    "errors",
    "rps",
    "p50_ms",
    "p99_ms",
    "ttfb_p50_ms",
    "added_p50_ms",
    "server_cpu_ms_per_request",
    "events_per_answer",
    "other_cpu_percent",
)


def test_percentile_interpolates_between_ranks():
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 50) == 3.0
    assert percentile([0.0, 10.0], 90) == pytest.approx(9.0)


def test_quick_mode_keeps_every_system_and_mode(monkeypatch):
    monkeypatch.setenv("BENCH_QUICK", "1")
    settings = parse_args([])
    assert settings.quick
    assert set(settings.systems) == set(BenchSettings().systems)
    assert set(settings.modes) == {"unary", "stream", "stream_long"}
    assert HEADLINE_CONCURRENCY in settings.concurrencies
    assert settings.concurrencies_for("stream_long") == (HEADLINE_CONCURRENCY,)
    monkeypatch.delenv("BENCH_QUICK")
    assert parse_args(["--concurrency", "2,4"]).concurrencies == (2, 4)
    assert parse_args(["--concurrency", "2,4"]).concurrencies_for("stream_long") == (2, 4)


def test_a_system_needs_its_baseline_in_the_run():
    with pytest.raises(ValueError, match="direct_anthropic"):
        BenchSettings(systems=("direct", "frontier_anthropic"))
    settings = BenchSettings(systems=("direct_anthropic", "frontier_anthropic"))
    assert settings.servers() == ("simulator", "frontier")


def _unary_spec(wire: str, path: str, headers: dict[str, str] | None = None) -> CellSpec:
    """One non-streamed request of 16 tokens to claude-haiku-4-5 in ``wire``'s format."""
    return CellSpec(
        url=f"http://127.0.0.1:1{path}",
        concurrency=1,
        duration_s=1.0,
        warmup=0,
        max_requests=1,
        stream=False,
        max_tokens=16,
        model="claude-haiku-4-5",
        wire=wire,
        headers=headers or {},
    )


def test_anthropic_request_is_what_the_sdk_sends():
    spec = _unary_spec("anthropic", "/v1/messages", {"x-api-key": "sk-ant"})
    unary = json.loads(request_body(spec))
    assert set(unary) == {"model", "max_tokens", "messages"}  # no `stream` unless streaming
    assert unary["max_tokens"] == 16 and unary["messages"][0]["role"] == "user"
    assert json.loads(request_body(dataclasses.replace(spec, stream=True)))["stream"] is True
    headers = request_headers(spec)
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == "sk-ant"
    assert not any(h.startswith("x-sim-") for h in headers)


def test_responses_request_is_what_the_sdk_sends():
    spec = _unary_spec("responses", "/v1/responses")
    unary = json.loads(request_body(spec))
    assert unary == {"model": "claude-haiku-4-5", "input": unary["input"], "max_output_tokens": 16}
    assert json.loads(request_body(dataclasses.replace(spec, stream=True)))["stream"] is True
    assert request_headers(spec) == {"content-type": "application/json"}


def _watch(wire: str, body: bytes, cut_every: int) -> StreamWatch:
    watch = StreamWatch(WIRES[wire])
    for i in range(0, len(body), cut_every):
        watch.feed(body[i : i + cut_every])
    return watch


ANTHROPIC_STREAM = (
    b'event: message_start\ndata: {"type":"message_start"}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
OPENAI_STREAM = b'data: {"id":"1"}\n\ndata: {"id":"2"}\n\ndata: [DONE]\n\n'
RESPONSES_STREAM = (
    b'event: response.created\ndata: {"type":"response.created"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","response":{"usage":'
    b'{"input_tokens":3,"output_tokens":16,"total_tokens":19}}}\n\n'
)


@pytest.mark.parametrize("cut_every", [1, 3, 7, 4096])
def test_stream_watch_counts_events_and_requires_the_end_marker(cut_every: int):
    """Whatever the chunking: events counted, a missing end or an error event is a failure."""
    watch = _watch("anthropic", ANTHROPIC_STREAM, cut_every)
    assert (watch.events, watch.problem()) == (3, None)
    cut = ANTHROPIC_STREAM[: ANTHROPIC_STREAM.index(b"event: message_stop")]
    assert _watch("anthropic", cut, cut_every).problem() == "stream ended without message_stop"
    failed = _watch("anthropic", b"event: error\ndata: {}\n\n" + ANTHROPIC_STREAM, cut_every)
    assert failed.problem() == "stream carried an error event"
    watch = _watch("openai", OPENAI_STREAM, cut_every)
    assert (watch.events, watch.problem()) == (3, None)
    errored = b'data: {"error":{"message":"x"}}\n\n' + OPENAI_STREAM
    assert _watch("openai", errored, cut_every).problem() == "stream carried an error event"
    assert _watch("openai", OPENAI_STREAM[:-14], cut_every).problem() is not None
    watch = _watch("responses", RESPONSES_STREAM, cut_every)
    assert (watch.events, watch.problem()) == (2, None)
    cut = RESPONSES_STREAM[: RESPONSES_STREAM.index(b"event: response.completed")]
    assert _watch("responses", cut, cut_every).problem() is not None


def _result(
    rps: float,
    p50: float,
    cpu_ms: float,
    requests: int = 100,
    events: float | None = None,
    process_cpu_ms: float | None = None,
) -> CellResult:
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
        root_cpu_ms={"server": cpu_ms if process_cpu_ms is None else process_cpu_ms},
        client_cpu_ms=20.0,
        events_per_answer=events,
    )


def _cell(
    system: SystemName, mode: Mode, rps: float, cpu_ms: float, events: float | None = None
) -> report.Cell:
    tokens = 256 if mode == "stream_long" else 16
    result = _result(rps, 1000 / rps, cpu_ms, events=events)
    return report.Cell(system, mode, HEADLINE_CONCURRENCY, result, None, tokens)


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
    found = figures.headline(rows)
    assert found["gateway_cpu_ms_per_request"] == pytest.approx(0.5)
    assert found["added_p50_ms"] == pytest.approx(2.5)
    assert found["throughput_ratio_vs_litellm"] == pytest.approx(20.0)
    assert found["recording_on_off_throughput_ratio"] == pytest.approx(0.8)
    assert rows[-1]["reason"] == "not started"


def test_recordings_cost_is_split_between_the_serving_process_and_its_writer():
    """Same run: the serving process alone on minus off, and the writer child (tree - process)."""
    conc = HEADLINE_CONCURRENCY
    cells = [
        report.Cell("frontier_openai", "stream", conc, _result(1000, 8.0, 70.0)),
        # 100 requests: 0.85 ms tree, 0.75 ms in the serving process (0.70 without recording)
        report.Cell(
            "frontier_openai_rec", "stream", conc, _result(900, 9.0, 85.0, process_cpu_ms=75.0)
        ),
    ]
    rows = report.build_rows(cells)
    rec = next(r for r in rows if r["system"] == "frontier_openai_rec")
    assert rec["server_process_cpu_ms_per_request"] == pytest.approx(0.75)
    cost = figures.headline(rows)["recording_cost_us_per_request"]
    assert cost["frontier_openai"]["stream"] == {"serving_process": 50, "writer_process": 100}
    assert cost["frontier_openai"]["unary"] == {"serving_process": None, "writer_process": None}


def test_frontier_figures_and_targets_on_synthetic_cells():
    """CPU per request and per extra chunk, ratios, readiness and memory against targets."""
    cells = [
        _cell("direct", "stream", 4000, 10.0, events=19),
        _cell("direct_anthropic", "unary", 4000, 10.0),
        _cell("frontier_openai", "unary", 1000, 80.0),  # 0.8 ms/req
        _cell("frontier_openai", "stream", 1000, 120.0, events=19),  # 1.2 ms/req
        # 1.2 + 240 events * 10 us = 3.6 ms/req
        _cell("frontier_openai", "stream_long", 200, 360.0, events=259),
        _cell("frontier_openai_rec", "unary", 950, 90.0),
        _cell("frontier_openai_rec", "stream", 800, 130.0, events=19),
        _cell("frontier_anthropic", "unary", 500, 200.0),  # 2.0 ms/req
        _cell("frontier_anthropic_rec", "unary", 500, 210.0),
        _cell("litellm", "stream", 40, 1500.0, events=19),
        _cell("translated_openai", "stream", 1000, 150.0, events=19),  # Messages -> OpenAI
        _cell("responses_anthropic", "stream", 500, 250.0, events=19),  # Responses -> Anthropic
    ]
    rows = report.build_rows(cells)
    anthropic_row = next(r for r in rows if r["system"] == "frontier_anthropic")
    assert anthropic_row["added_p50_ms"] == pytest.approx(2.0 - 0.25)  # vs direct_anthropic
    startup: dict[ServerName, float] = {"simulator": 0.3, "switchyard": 1.2, "frontier": 2.5}
    memory = {"frontier": Memory(rss_mb=280.0, peak_rss_mb=290.0)}
    found = figures.headline(rows, startup, memory)
    assert found["frontier_cpu_ms_per_request"]["openai"] == {"unary": 0.8, "stream": 1.2}
    assert found["frontier_cpu_ms_per_request"]["anthropic"]["stream"] is None
    # Each synthetic cell's simulator spent 0.1 ms a request.
    assert found["frontier_cpu_vs_upstream"]["openai"] == {"unary": 8.0, "stream": 12.0}
    assert found["frontier_cpu_vs_upstream"]["anthropic"] == {"unary": 20.0, "stream": None}
    assert found["cpu_us_per_extra_chunk"]["frontier_openai"] == pytest.approx(10.0)
    assert found["cpu_us_per_extra_chunk"]["direct"] is None  # no long stream measured
    assert found["frontier_stream_vs_litellm"]["openai"] == pytest.approx(25.0)
    assert found["recording_on_off"]["frontier_openai"] == {"unary": 0.95, "stream": 0.8}
    assert found["recording_on_off"]["frontier_anthropic"]["unary"] == pytest.approx(1.0)
    assert found["recording_on_off_cpu"]["frontier_anthropic"]["unary"] == pytest.approx(
        2 / 2.1, abs=1e-3
    )
    assert found["time_to_ready_s"]["frontier"] == pytest.approx(2.5)
    assert found["time_to_ready_s"]["switchyard_rec"] is None
    assert found["rss_mb"]["frontier"] == pytest.approx(280.0)
    verdicts = {t["figure"]: t["pass"] for t in figures.check_targets(found)}
    assert verdicts["frontier_cpu_ms_per_request.openai.unary"] is True
    assert verdicts["frontier_cpu_ms_per_request.openai.stream"] is True
    assert verdicts["frontier_cpu_ms_per_request.anthropic.unary"] is False
    assert verdicts["frontier_cpu_ms_per_request.anthropic.stream"] is None
    assert verdicts["cpu_us_per_extra_chunk.frontier_openai"] is True
    assert verdicts["frontier_stream_vs_litellm.openai"] is True
    assert verdicts["recording_on_off.frontier_openai.unary"] is True
    assert verdicts["recording_on_off.frontier_openai.stream"] is False
    assert verdicts["time_to_ready_s.switchyard"] is True
    assert verdicts["time_to_ready_s.frontier"] is False
    assert verdicts["rss_mb.frontier"] is True
    assert found["translated_cpu_ms_per_request"]["messages_to_openai"]["stream"] == 1.5
    assert verdicts["translated_cpu_ms_per_request.messages_to_openai.stream"] is True
    assert verdicts["translated_cpu_ms_per_request.responses_to_anthropic.stream"] is False
    assert verdicts["translated_stream_vs_litellm.messages_to_openai"] is True  # 25x
    assert verdicts["translated_stream_vs_litellm.responses_to_anthropic"] is False  # 12.5x
    assert verdicts["translated_cpu_ms_per_request.chat_to_anthropic.unary"] is None
    summary = figures.targets_summary(figures.check_targets(found))
    assert sum(summary.values()) == len(figures.TARGETS)


def test_the_cost_of_redacting_secrets_is_read_against_its_twin():
    """``secrets: redact`` with a token in the prompt, against the same path without it."""
    cells = [
        _cell("frontier_openai_rec", "unary", 950, 90.0),  # 0.9 ms/req
        _cell("frontier_openai_secrets_rec", "unary", 900, 95.0),  # 0.95 ms/req
        _cell("frontier_openai_secrets_rec", "stream", 800, 130.0, events=19),
    ]
    found = figures.headline(report.build_rows(cells))
    assert found["secrets_redact_cpu_ms_per_request"] == {"unary": 0.95, "stream": 1.3}
    assert found["secrets_redact_cpu_added_us"] == {"unary": 50.0, "stream": None}


def test_the_secrets_system_sends_its_prompt_with_a_token():
    settings = BenchSettings(
        systems=("direct", "frontier_openai_rec", "frontier_openai_secrets_rec")
    )
    assert settings.servers() == ("simulator", "frontier_rec", "frontier_secrets_rec")
    config = systems.gateway_config("frontier_secrets_rec", "http://sim", {"enabled": False})
    assert {b["secrets"] for b in config["backends"].values()} == {"redact"}
    assert (
        "secrets"
        not in systems.gateway_config("frontier_rec", "http://sim", {})["backends"][
            "frontier-openai"
        ]
    )


def test_profile_summary_keeps_busy_main_thread_samples():
    raw = "\n".join(
        [
            "thread (1): MainThread;main (gateway/serve.py:74);"
            "_handle (gateway/doors/openai/handlers.py:102);write (libc.so.6) 6",
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
    """Simulator in both formats, the local path recording on and off, the frontier path to the
    Anthropic-format upstream through the Anthropic door, SQLite store; the summary's shape
    only."""
    out = tmp_path / "bench"
    chosen = "direct,direct_anthropic,switchyard,switchyard_rec,frontier_anthropic"
    argv = [sys.executable, "-m", "loadtests.bench.gateway", "--systems", chosen]
    argv += ["--concurrency", str(HEADLINE_CONCURRENCY), "--duration", "0.3", "--warmup", "2"]
    argv += ["--store-records", "50", "--store-backends", "sqlite", "--out-dir", str(out)]
    argv += ["--ready-samples", "2", "--ttft-rounds", "20"]
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
    assert summary["frontier_cpu_ms_per_request"]["anthropic"]["stream"] is not None
    assert summary["cpu_us_per_extra_chunk"]["frontier_anthropic"] is not None
    for server in ("switchyard", "switchyard_rec", "frontier"):
        assert summary["time_to_ready_s"][server] is not None
        assert len(summary["startup_samples_s"][server]) == 2
        # each start waited for the servers already up to be quiet
        assert summary["startup_settle_s"][server] >= systems.IDLE_SAMPLE_S
        assert summary["rss_mb"][server] is not None
    assert summary["time_to_ready_s"]["frontier_rec"] is None  # not asked for
    assert summary["store_write_records_per_s"]["sqlite"] is not None
    assert summary["token_counting"]["cases_us"]["agent_warm"]["openai"] > 0
    added = summary["added_ttft_ms"]  # each gateway path against its format's direct requests
    assert set(added) == {"switchyard", "switchyard_rec", "frontier_anthropic"}
    for row in added.values():
        assert row["pairs"] == 20 and row["errors"] == 0, row
        assert row["p50_ms"] > 0 and row["direct_p50_ms"] > 0
    cells = summary["cells"]
    assert len(cells) == 5 * 3
    for cell in cells:
        for name in CELL_FIELDS:
            assert name in cell, (name, cell)
        assert cell["requests"] > 0 and cell["errors"] == 0, cell
    streamed = [c for c in cells if c["mode"] != "unary"]
    assert all(c["ttfb_p50_ms"] is not None for c in streamed)
    long_events = {c["system"]: c["events_per_answer"] for c in cells if c["mode"] == "stream_long"}
    short_events = {c["system"]: c["events_per_answer"] for c in cells if c["mode"] == "stream"}
    for system, events in long_events.items():
        assert events - short_events[system] == 256 - 16, system  # one event per extra token
    for name in ("report.json", "cells.csv", "chart.png"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "report.json").read_text())["cells"] == cells


def test_recording_ratio_is_the_median_of_the_main_pair_and_the_rounds() -> None:
    from loadtests.bench.gateway import figures

    assert figures._median_ratio(0.6, [0.95, 0.93, 0.97]) == 0.94
    assert figures._median_ratio(None, [0.9, 1.0, 0.8]) == 0.9
    assert figures._median_ratio(None, []) is None


def test_recording_rounds_alternate_which_system_runs_first() -> None:
    """With the main cells' pair (recording second), an odd number of rounds puts as many
    pairs in each order."""
    from loadtests.bench.gateway.cells import recording_first
    from loadtests.bench.gateway.settings import BenchSettings, quick_settings

    for settings in (BenchSettings(), quick_settings()):
        firsts = [recording_first(i) for i in range(settings.recording_rounds)]
        assert sum(firsts) == settings.recording_rounds - sum(firsts) + 1  # + the main pair


def test_the_cells_wait_for_a_server_busy_after_it_became_ready(tmp_path: Path) -> None:
    """A server still working in the background (a gateway importing litellm after /ready) is
    waited for before the first cell; the wait and its quiet sample are reported."""
    busy_then_idle = (
        "import time\n"
        "end = time.process_time() + 1.5\n"
        "while time.process_time() < end: pass\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", busy_then_idle])
    try:
        server = Server("frontier", 0, child, tmp_path / "log", "/ready", 0.0)
        idle, waited = systems.settle({"frontier": server})
    finally:
        child.kill()
        child.wait()
    assert idle["frontier"] < systems.QUIET_PERCENT
    assert waited >= systems.IDLE_SAMPLE_S  # at least one busy sample came first


def test_added_ttft_pairs_each_gateway_request_with_the_direct_one_of_its_round() -> None:
    """Differences are taken per round (not of the percentiles), and a failed request drops its
    round's pair and is counted."""
    cell = CellSpec("http://127.0.0.1:1/v1/chat/completions", 1, 1.0, 0, 1, True, 30, "m")
    spec = ttft.TtftSpec(
        {"direct": cell, "frontier_openai": cell}, {"frontier_openai": "direct"}, 4, 0
    )
    samples = ttft._Samples(
        {"direct": [1.0, 5.0, 1.0, 1.0], "frontier_openai": [1.5, 5.25, None, 1.75]},
        {"direct": 0, "frontier_openai": 1},
        {"frontier_openai": "HTTP 502"},
    )
    row = ttft.figures(spec, samples)["frontier_openai"]
    assert row["pairs"] == 3 and row["errors"] == 1 and row["error_sample"] == "HTTP 502"
    assert row["added_p50_ms"] == 0.5  # of 0.5, 0.25, 0.75; the slow round 2 adds 0.25 only
    assert row["p50_ms"] == 1.75 and row["direct_p50_ms"] == 1.0
    assert ttft.spec_from_json(json.loads(json.dumps(dataclasses.asdict(spec)))) == spec
