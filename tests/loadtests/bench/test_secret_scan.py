"""The secret-scanning benchmark (``loadtests/bench/secret_scan.py``): every case timed, the
memo's effect visible; the last line of its output is one JSON object."""

from __future__ import annotations

from tests.loadtests.bench.last_line import bench_summary

CASES = {
    "short",
    "short_secret",
    "agent_cold",
    "agent_warm",
    "large_cold",
    "agent_cold_rules",
    "agent_cold_plugins",
    "stream_event_plain",
    "stream_event_placeholder",
}


def test_the_benchmark_reports_each_case_as_its_last_line() -> None:
    result = bench_summary("loadtests.bench.secret_scan", "--quick")
    cases = result["cases_us"]
    assert set(cases) == CASES and all(us > 0 for us in cases.values())
    # a conversation's next turn costs a fraction of scanning it whole (the memo of texts)
    assert cases["agent_warm"] < cases["agent_cold"] / 5
    assert result["import_s"] > 0 and result["chars"]["agent_turn"] > 100_000
