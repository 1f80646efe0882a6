"""Roll-ups give the raw record's figures (percentiles within a bucket), however much of the
window is rolled up, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gateway.console.synthetic import generate
from traffic.store import FeedbackRecord, InferenceFilter, StoreBackend
from traffic.store.console_queries import Window, breakdown, search, series
from traffic.store.rollup import (
    RATIO,
    dims,
    floor_hour,
    hist_percentile,
    roll_up,
    rolled_breakdown,
    rolled_series,
)

NOW = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
SPAN = timedelta(hours=30)
LOCAL = ["local"]
EXACT = ("count", "errors", "failovers", "local", "accepted", "rejected", "edited")


@pytest.fixture
async def traffic(store_backend: StoreBackend) -> StoreBackend:
    for batch in generate(1200, until=NOW, span=SPAN, seed=5):
        await store_backend.insert_inferences(batch.inferences)
        await store_backend.insert_feedback(batch.feedback)
    return store_backend


def _same(rolled: list[dict[str, Any]], raw: list[dict[str, Any]]) -> None:
    by_group = {r["group"]: r for r in raw}
    assert {r["group"] for r in rolled} == set(by_group)
    for r in rolled:
        exact = by_group[r["group"]]
        assert {k: r[k] for k in EXACT} == {k: exact[k] for k in EXACT}, r["group"]
        assert r["cost_usd"] == pytest.approx(exact["cost_usd"])
        for key in ("latency_ms_p50", "latency_ms_p99", "ttft_ms_p90"):
            if exact[key] is None:
                assert r[key] is None
            else:
                assert exact[key] / RATIO <= r[key] <= exact[key] * RATIO, (key, r, exact)


@pytest.mark.parametrize("group", ["route_target", "all", "decision", "p_local", "tag:family"])
async def test_rolled_breakdowns_match_the_raw_record(traffic: StoreBackend, group: str) -> None:
    window = Window(NOW - timedelta(hours=26, minutes=17), NOW)
    raw = await breakdown(traffic, window, group, LOCAL)
    _same(await rolled_breakdown(traffic, window, group, LOCAL), raw)  # nothing rolled yet
    rolled = await roll_up(traffic, dims("family"), NOW)
    assert rolled["all"] == 30  # every closed hour since the oldest record
    _same(await rolled_breakdown(traffic, window, group, LOCAL), raw)
    assert all(r["approximate"] for r in await rolled_breakdown(traffic, window, group, LOCAL))


async def test_a_late_feedback_is_counted_when_its_hour_is_rolled_again(
    traffic: StoreBackend,
) -> None:
    window = Window(NOW - timedelta(hours=20), NOW)
    await roll_up(traffic, ["all"], NOW)
    again = await roll_up(traffic, ["all"], NOW + timedelta(minutes=10))
    assert again == {"all": 3}  # the last closed hours only
    hit = (await rolled_breakdown(traffic, window, "all", LOCAL))[0]
    late_at = floor_hour(NOW) - timedelta(minutes=30)
    target = await _one_id(traffic, late_at)
    await traffic.insert_feedback([FeedbackRecord(inference_id=target, kind="accepted")])
    await roll_up(traffic, ["all"], NOW + timedelta(minutes=20))
    after = (await rolled_breakdown(traffic, window, "all", LOCAL))[0]
    assert after["accepted"] == hit["accepted"] + 1


async def _one_id(store: StoreBackend, near: datetime) -> str:
    since = near - timedelta(minutes=20)
    page = await search(store, InferenceFilter(since=since, until=near), limit=1)
    return page.hits[0].id


async def test_rolled_series_matches_the_raw_series(traffic: StoreBackend) -> None:
    window = Window(floor_hour(NOW) - timedelta(hours=24), floor_hour(NOW))
    await roll_up(traffic, ["all"], NOW)
    raw = await series(traffic, window, 6 * 3600)
    rolled = await rolled_series(traffic, window, 6 * 3600)
    assert [(p.bucket_start, p.route_target, p.requests, p.errors) for p in rolled] == [
        (p.bucket_start, p.route_target, p.requests, p.errors) for p in raw
    ]


def test_histogram_percentiles_fall_in_the_right_bucket() -> None:
    counts = [0] * 34
    counts[1] = 10  # [1, 1.5) ms
    counts[10] = 10  # [RATIO**9, RATIO**10)
    low, high = hist_percentile(counts, 0.25), hist_percentile(counts, 0.9)
    assert low is not None and 1 <= low < 1.5
    assert high is not None and RATIO**9 <= high < RATIO**10
    assert hist_percentile([0] * 34, 0.5) is None
