"""The console's reads give the same figures on SQLite and PostgreSQL, computed here by hand
from the records written."""

from __future__ import annotations

import dataclasses
import statistics
from datetime import UTC, datetime, timedelta

import pytest

from traffic.store import FeedbackRecord, InferenceFilter, InferenceRecord, StoreBackend
from traffic.store.console_queries import (
    Window,
    breakdown,
    changes,
    episode,
    exchange,
    recent_ok,
    record_change,
    releases,
    search,
    series,
    upsert_release,
)
from traffic.store.ids import id_at
from traffic.store.records import ChangeRecord, ReleaseRecord
from traffic.store.schema import CHANGE_LOG, ROUTING_RELEASE
from traffic.store.summary import percentile

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
WINDOW = Window(NOW - timedelta(hours=2), NOW)


def _record(n: int, minutes_ago: float, **fields: object) -> InferenceRecord:
    at = NOW - timedelta(minutes=minutes_ago)
    base: dict[str, object] = {
        "id": id_at(at, n),
        "ts": at,
        "endpoint": "chat.completions",
        "wire_format": "openai.chat",
        "request": {"model": "auto", "messages": [{"role": "user", "content": f"task {n}"}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]},
        "route_target": "local",
        "served_model": "m-local",
        "status": 200,
        "latency_ms": 100.0 + n,
        "attempts": [{"target": "local", "status": 200}],
    }
    base.update(fields)
    return InferenceRecord(**base)  # type: ignore[arg-type]


def _traffic() -> tuple[list[InferenceRecord], list[FeedbackRecord]]:
    records = []
    for n in range(12):
        frontier = n % 3 == 0
        records.append(
            _record(
                n,
                minutes_ago=100 - 5 * n,
                route_target="frontier" if frontier else "local",
                served_model="m-frontier" if frontier else "m-local",
                cost_usd=0.002 * n if frontier else 0.0,
                ttft_ms=20.0 + n if n % 2 else None,
                policy_reason=(
                    f"learned:local p_local=0.{70 + n} threshold=0.600 scorer=s1"
                    if not frontier
                    else "rule:tools-to-frontier"
                ),
                tags={"family": "complete" if n < 6 else "explain"},
                api_key_id="key-a" if n < 8 else None,
                episode_id=f"ep-{n // 4}",
                status=502 if n == 7 else 200,
                error="upstream error" if n == 7 else None,
                attempts=(
                    [{"target": "frontier", "status": 503}, {"target": "local", "status": 200}]
                    if n == 5
                    else [{"target": "local", "status": 200}]
                ),
            )
        )
    records.append(_record(99, minutes_ago=200))  # before the window
    feedback = [
        FeedbackRecord(inference_id=records[1].id, kind="accepted"),
        FeedbackRecord(inference_id=records[2].id, kind="rejected"),
        FeedbackRecord(inference_id=records[2].id, kind="edited"),
        FeedbackRecord(inference_id=records[3].id, kind="accepted"),
        FeedbackRecord(inference_id=records[12].id, kind="accepted"),  # outside the window
    ]
    return records, feedback


@pytest.fixture
async def filled(store_backend: StoreBackend) -> tuple[StoreBackend, list[InferenceRecord]]:
    records, feedback = _traffic()
    await store_backend.insert_inferences(records)
    await store_backend.insert_feedback(feedback)
    return store_backend, records


async def test_breakdown_by_target_counts_what_the_window_holds(filled) -> None:
    store, records = filled
    inside = records[:12]
    rows = {r["group"]: r for r in await breakdown(store, WINDOW, "route_target", ["local"])}
    assert set(rows) == {"local", "frontier"}
    local = [r for r in inside if r.route_target == "local"]
    row = rows["local"]
    assert row["count"] == len(local) == row["local"]
    assert row["errors"] == 1 and row["failovers"] == 1
    assert rows["frontier"]["local"] == 0
    assert rows["frontier"]["cost_usd"] == pytest.approx(
        sum(r.cost_usd or 0 for r in inside if r.route_target == "frontier")
    )
    latencies = sorted(r.latency_ms for r in local)
    assert row["latency_ms_p50"] == pytest.approx(statistics.median(latencies))
    assert row["latency_ms_p99"] == pytest.approx(percentile(latencies, 0.99))
    ttfts = sorted(r.ttft_ms for r in local if r.ttft_ms is not None)
    assert row["ttft_ms_p90"] == pytest.approx(percentile(ttfts, 0.9))
    assert (row["accepted"], row["rejected"], row["edited"]) == (1, 1, 1)
    assert rows["frontier"]["accepted"] == 1  # record 3; record 12's is outside the window
    (everything,) = await breakdown(store, WINDOW, "all", ["local"])
    assert everything["count"] == 12


async def test_breakdown_by_decision_scorer_bucket_and_class(filled) -> None:
    store, _ = filled
    decisions = {r["group"]: r["count"] for r in await breakdown(store, WINDOW, "decision", [])}
    assert decisions == {"learned:local": 8, "rule:tools-to-frontier": 4}
    buckets = {r["group"]: r["count"] for r in await breakdown(store, WINDOW, "p_local", [])}
    # p_local 0.71, 0.72, 0.74, 0.75, 0.77, 0.78 -> 0.7; 0.80, 0.81 -> 0.8; no score -> None
    assert {round(k, 1) if k is not None else None: v for k, v in buckets.items()} == {
        0.7: 6,
        0.8: 2,
        None: 4,
    }
    classes = {r["group"]: r["count"] for r in await breakdown(store, WINDOW, "tag:family", [])}
    assert classes == {"complete": 6, "explain": 6}
    with pytest.raises(ValueError, match="group must be one of"):
        await breakdown(store, WINDOW, "request; DROP TABLE inference", [])


async def test_series_buckets_requests_by_target(filled) -> None:
    store, records = filled
    points = await series(store, WINDOW, 1800)
    assert sum(p.requests for p in points) == 12
    assert sum(p.errors for p in points) == 1
    for p in points:
        expected = [
            r
            for r in records[:12]
            if r.route_target == p.route_target
            and p.bucket_start <= r.ts.timestamp() < p.bucket_start + 1800
        ]
        assert p.requests == len(expected)


async def test_search_filters_by_text_and_pages_newest_first(filled) -> None:
    store, records = filled
    window = InferenceFilter(since=WINDOW.since, until=WINDOW.until)
    first = await search(store, window, limit=5)
    assert [h.id for h in first.hits] == [r.id for r in reversed(records[7:12])]
    second = await search(store, window, before=first.next_before, limit=5)
    assert [h.id for h in second.hits] == [r.id for r in reversed(records[2:7])]
    third = await search(store, window, before=second.next_before, limit=5)
    assert len(third.hits) == 2 and third.next_before is None
    found = await search(store, window, text="ANSWER 4")
    assert [h.id for h in found.hits] == [records[4].id]
    assert (await search(store, window, text="50%_\\")).hits == []
    judged = await search(
        store,
        InferenceFilter(since=WINDOW.since, until=WINDOW.until, has_feedback="rejected"),
    )
    assert [(h.id, h.feedback) for h in judged.hits] == [(records[2].id, ("rejected", "edited"))]


async def test_one_exchange_one_episode_and_usage_per_key(filled) -> None:
    store, records = filled
    row = await exchange(store, records[2].id)
    assert row is not None and row.inference == records[2]
    assert [f.kind for f in row.feedback] == ["rejected", "edited"]
    assert await exchange(store, "not-an-id") is None
    hits = await episode(store, "ep-1")
    assert [h.id for h in hits] == [r.id for r in records[4:8]]
    usage = {r["group"]: r["count"] for r in await breakdown(store, WINDOW, "api_key_id", [])}
    assert usage == {"key-a": 8, None: 4}


async def test_recent_ok_reads_the_newest_successful_exchanges(filled) -> None:
    store, records = filled
    rows = await recent_ok(store, WINDOW, 5)
    assert [r.inference.id for r in rows] == [r.id for r in records[:12] if r.ok][-5:]
    assert [f.kind for f in (await recent_ok(store, WINDOW, 12))[2].feedback] == [
        "rejected",
        "edited",
    ]


async def test_changes_are_listed_newest_first_by_kind(store_backend: StoreBackend) -> None:
    for n, action in enumerate(("routing.canary", "key.create", "routing.promote")):
        at = NOW + timedelta(seconds=n)
        await record_change(
            store_backend,
            ChangeRecord(id=id_at(at, n), ts=at, actor="ann", action=action, subject=f"s{n}"),
        )
    assert [c.action for c in await changes(store_backend)] == [
        "routing.promote",
        "key.create",
        "routing.canary",
    ]
    routing = await changes(store_backend, action_prefix="routing.")
    assert [c.subject for c in routing] == ["s2", "s0"] and routing[0].actor == "ann"


def test_the_change_log_table_and_its_record_name_the_same_fields() -> None:
    assert CHANGE_LOG.column_names == tuple(f.name for f in dataclasses.fields(ChangeRecord))


async def test_a_release_round_trips_and_is_updated_in_place(store_backend: StoreBackend) -> None:
    routing = {"version": "v2", "default": "frontier", "learned": {"quality_target": 0.9}}
    first = ReleaseRecord(
        id="v2+fit-1",
        created_at=NOW,
        updated_at=NOW,
        live_version="v1+fit-0",
        candidate_weights="ft-2",
        routing=routing,
        share=0.3,
        schedule=[0.3, 1.0],
    )
    older = dataclasses.replace(first, id="v1+fit-0", created_at=NOW - timedelta(hours=1))
    await upsert_release(store_backend, older)
    await upsert_release(store_backend, first)
    decision = {"test": "sequential", "delta_low": -0.21, "delta_high": -0.12, "candidate": [3, 9]}
    done = dataclasses.replace(
        first,
        status="rolled_back",
        updated_at=NOW + timedelta(minutes=5),
        decided_by="release-monitor",
        decision=decision,
    )
    await upsert_release(store_backend, done)
    found = await releases(store_backend)
    assert [r.id for r in found] == ["v2+fit-1", "v1+fit-0"]
    assert found[0] == done  # every field, the JSON ones included, read back as written
    assert await releases(store_backend, limit=1) == [done]


def test_the_release_table_and_its_record_name_the_same_fields() -> None:
    names = tuple(f.name for f in dataclasses.fields(ReleaseRecord))
    assert ROUTING_RELEASE.column_names == names
