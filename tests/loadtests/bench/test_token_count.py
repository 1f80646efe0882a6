"""The token-counting benchmark (``loadtests/bench/token_count.py``): every case timed for both
targets, and what loading each encoding costs; the last line of its output is one JSON object."""

from __future__ import annotations

from tests.loadtests.bench.last_line import bench_summary

CASES = {"short", "short_keyed", "agent_cold", "agent_warm", "large_cold"}


def test_the_benchmark_reports_each_case_for_both_targets_as_its_last_line() -> None:
    result = bench_summary("loadtests.bench.token_count", "--quick")
    assert set(result["cases_us"]) == CASES
    for by_target in result["cases_us"].values():
        assert set(by_target) == {"openai", "anthropic"}
        assert all(us > 0 for us in by_target.values())
    # a conversation's next turn costs a fraction of counting it whole (the cache of long texts)
    assert result["cases_us"]["agent_warm"]["openai"] < result["cases_us"]["agent_cold"]["openai"]
    assert set(result["load_s"]) == set(result["encoding_rss_mb"]) == {"o200k_base", "cl100k_base"}
