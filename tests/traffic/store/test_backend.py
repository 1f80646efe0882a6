from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from traffic.store import (
    ApiKeyRecord,
    FeedbackKind,
    FeedbackRecord,
    InferenceFilter,
    InferenceRow,
    JsonText,
    ModelVersionRecord,
    PolicyVersionRecord,
    ShadowRecord,
    StoreBackend,
    StoreConflict,
    StoreDataError,
)

from .scenario import day, inference


async def read_all(
    backend: StoreBackend, filters: InferenceFilter | None = None, **kw: Any
) -> list[InferenceRow]:
    return [row async for row in backend.iter_inferences(filters, **kw)]


async def test_round_trip_with_feedback_and_shadows(store_backend):
    rec = inference(
        datetime.now(UTC),
        api_key_id="key-1",
        episode_id="session-9",
        response={"choices": [{"message": {"content": "héllo ✓"}}]},
        weights_version="w3",
        replica="replica-0",
        policy_version="p1",
        policy_reason="short prompt",
        stream=True,
        ttft_ms=3.25,
        prompt_tokens=12,
        completion_tokens=5,
        cached_tokens=8,
        cache_creation_tokens=3,
        cost_usd=0.0012,
        tags={"team": "ide", "lang": "py"},
        attempts=[{"target": "frontier", "status": 503, "error": "busy", "latency_ms": 4.0}],
    )
    fb = [
        FeedbackRecord(inference_id=rec.id, kind="accepted"),
        FeedbackRecord(inference_id=rec.id, kind="score", value=0.75, payload={"by": "ide"}),
    ]
    shadow = ShadowRecord(
        inference_id=rec.id, target="local", response={"text": "x"}, comparison={"match": 1.0}
    )
    await store_backend.insert_inferences([rec])
    await store_backend.insert_feedback(fb)
    await store_backend.insert_shadows([shadow])

    (row,) = await read_all(store_backend, with_shadows=True)
    assert row.inference == rec
    assert row.feedback == fb
    assert row.shadows == [shadow]
    (plain,) = await read_all(store_backend)
    assert plain.shadows == []
    assert await store_backend.inference_exists(rec.id)
    assert await store_backend.inference_exists(rec.id.upper())
    assert not await store_backend.inference_exists(inference().id)
    assert not await store_backend.inference_exists("not-an-id")


async def test_inserts_are_idempotent_by_id(store_backend):
    recs = [inference() for _ in range(3)]
    fb = FeedbackRecord(inference_id=recs[0].id, kind="rejected")
    await store_backend.insert_inferences(recs)
    await store_backend.insert_inferences([*recs, recs[1]])
    await store_backend.insert_feedback([fb, fb])
    await store_backend.insert_feedback([fb])
    rows = await read_all(store_backend)
    assert [r.inference.id for r in rows] == sorted(r.id for r in recs)
    assert [len(r.feedback) for r in rows if r.inference.id == recs[0].id] == [1]


async def test_iteration_pages_in_id_order(store_backend):
    recs = [inference() for _ in range(25)]
    await store_backend.insert_inferences(list(reversed(recs)))
    ids = [r.inference.id async for r in store_backend.iter_inferences(None, batch_size=7)]
    assert ids == [r.id for r in recs]


async def test_filters(store_backend):
    a = inference(day(1), route_target="local", api_key_id="k1", tags={"team": "a", "x": "1"})
    b = inference(day(2), route_target="frontier", served_model="gpt", endpoint="responses")
    c = inference(day(3), route_target="local", status=500, error="boom", tags={"team": "a"})
    d = inference(day(4), route_target="local", episode_id="e1", error="stream cut")
    await store_backend.insert_inferences([a, b, c, d])
    await store_backend.insert_feedback(
        [
            FeedbackRecord(inference_id=a.id, kind="accepted"),
            FeedbackRecord(inference_id=c.id, kind="edited"),
        ]
    )

    async def ids(**kw: Any) -> list[str]:
        return [r.inference.id for r in await read_all(store_backend, InferenceFilter(**kw))]

    assert await ids() == [a.id, b.id, c.id, d.id]
    assert await ids(since=day(2), until=day(4)) == [b.id, c.id]
    assert await ids(since=day(2, hour=12) + timedelta(milliseconds=1)) == [c.id, d.id]
    assert await ids(route_target="local") == [a.id, c.id, d.id]
    assert await ids(served_model="gpt") == [b.id]
    assert await ids(endpoint="responses") == [b.id]
    assert await ids(api_key_id="k1") == [a.id]
    assert await ids(episode_id="e1") == [d.id]
    assert await ids(tags={"team": "a"}) == [a.id, c.id]
    assert await ids(tags={"team": "a", "x": "1"}) == [a.id]
    assert await ids(tags={"team": "b"}) == []
    assert await ids(has_feedback="accepted") == [a.id]
    assert await ids(has_feedback="any") == [a.id, c.id]
    assert await ids(ok_only=True) == [a.id, b.id]
    assert await ids(ok_only=True, route_target="local", has_feedback="accepted") == [a.id]


async def test_summarize_known_numbers(store_backend):
    local = [
        inference(day(1, 1), latency_ms=10, ttft_ms=1, cost_usd=0.5),
        inference(day(1, 2), latency_ms=20, ttft_ms=2, cost_usd=0.25),
        inference(day(1, 3), latency_ms=30, status=500, error="upstream"),
        inference(day(2, 1), latency_ms=40, ttft_ms=4, error="stream cut"),
    ]
    frontier = [inference(day(1, 4), route_target="frontier", latency_ms=100, cost_usd=2.0)]
    await store_backend.insert_inferences(local + frontier)
    kinds: list[FeedbackKind] = ["accepted", "accepted", "rejected", "edited", "score", "comment"]
    await store_backend.insert_feedback(
        [FeedbackRecord(inference_id=local[i % 2].id, kind=k) for i, k in enumerate(kinds)]
    )

    (total,) = await store_backend.summarize()
    assert total["count"] == 5 and total["errors"] == 2

    by_target = await store_backend.summarize(None, ["route_target"])
    assert [r["route_target"] for r in by_target] == ["frontier", "local"]
    f, lo = by_target
    assert lo["count"] == 4 and lo["errors"] == 2
    assert lo["cost_usd"] == pytest.approx(0.75)
    assert lo["latency_ms_p50"] == pytest.approx(25.0)
    assert lo["latency_ms_p90"] == pytest.approx(37.0)
    assert lo["latency_ms_p99"] == pytest.approx(39.7)
    assert lo["ttft_ms_p50"] == pytest.approx(2.0)
    assert lo["ttft_ms_p90"] == pytest.approx(3.6)
    assert (lo["accepted"], lo["rejected"], lo["edited"]) == (2, 1, 1)
    assert lo["acceptance_rate"] == pytest.approx(0.5)
    assert f["count"] == 1 and f["ttft_ms_p50"] is None and f["acceptance_rate"] is None
    assert f["latency_ms_p99"] == pytest.approx(100.0)

    by_day = await store_backend.summarize(InferenceFilter(route_target="local"), ["day"])
    assert [(r["day"], r["count"]) for r in by_day] == [("2025-03-01", 3), ("2025-03-02", 1)]
    assert await store_backend.summarize(InferenceFilter(route_target="none")) == []
    with pytest.raises(ValueError):
        await store_backend.summarize(None, ["nonsense"])


async def test_api_key_crud_and_spend(store_backend):
    key = ApiKeyRecord(name="ci", key_hash="h1", prefix="sk-ab", rpm_limit=60, budget_usd=5.0)
    other = ApiKeyRecord(name="old", key_hash="h2", prefix="sk-cd")
    await store_backend.create_api_key(key)
    await store_backend.create_api_key(other)
    with pytest.raises(StoreConflict):
        await store_backend.create_api_key(ApiKeyRecord(name="dup", key_hash="h1", prefix="x"))

    assert await store_backend.get_api_key_by_hash("h1") == key
    assert await store_backend.get_api_key(other.id) == other
    assert await store_backend.get_api_key_by_hash("nope") is None

    assert await store_backend.add_spend(key.id, 1.25) == pytest.approx(1.25)
    assert await store_backend.add_spend(key.id, 0.5) == pytest.approx(1.75)
    assert await store_backend.add_spend("unknown", 1.0) is None

    assert await store_backend.revoke_api_key(other.id) is True
    assert await store_backend.revoke_api_key(other.id) is False
    assert await store_backend.revoke_api_key("unknown") is False
    revoked = await store_backend.get_api_key(other.id)
    assert revoked is not None and revoked.revoked_at is not None

    assert [k.id for k in await store_backend.list_api_keys()] == [key.id, other.id]
    active = await store_backend.list_api_keys(include_revoked=False)
    assert [(k.id, k.spent_usd) for k in active] == [(key.id, pytest.approx(1.75))]


async def test_versions_upsert(store_backend):
    v1 = ModelVersionRecord(id="m1", path="/ckpt/1", metadata={"steps": 10})
    v2 = ModelVersionRecord(id="m2", parent="m1", path="/ckpt/2", eval={"win": 0.6})
    await store_backend.upsert_model_version(v1)
    await store_backend.upsert_model_version(v2)
    promoted = ModelVersionRecord(
        id="m2", parent="m1", path="/ckpt/2", eval={"win": 0.6}, status="serving"
    )
    await store_backend.upsert_model_version(promoted)
    listed = await store_backend.list_model_versions()
    assert [(m.id, m.status) for m in listed] == [("m1", "candidate"), ("m2", "serving")]
    assert listed[1].created_at == v2.created_at  # created_at survives an upsert

    p = PolicyVersionRecord(id="p1", config={"threshold": 0.3})
    await store_backend.upsert_policy_version(p)
    await store_backend.upsert_policy_version(
        PolicyVersionRecord(id="p1", config={"threshold": 0.4}, status="canary")
    )
    (got,) = await store_backend.list_policy_versions()
    assert got.config == {"threshold": 0.4} and got.status == "canary"


async def test_invalid_data_is_a_data_error(store_backend):
    with pytest.raises(StoreDataError):
        await store_backend.insert_feedback([FeedbackRecord(inference_id="bad", kind="accepted")])
    with pytest.raises(StoreDataError):
        await store_backend.insert_inferences([inference(request={"x": 2**70, "y": float("nan")})])


async def test_nan_in_json_is_stored_as_null_rather_than_losing_the_record(store_backend):
    rec = inference(request={"x": float("nan"), "y": [float("inf")]})
    await store_backend.insert_inferences([rec])
    (row,) = await read_all(store_backend)
    assert row.inference.request == {"x": None, "y": [None]}


async def test_encoded_json_is_stored_as_it_is_and_reads_back_as_its_object(store_backend):
    """A body as the client sent it (JsonText: spacing, escapes, a NUL escape PostgreSQL's jsonb
    refuses) reads back as the body parsed."""
    body = b'{ "model": "m", "messages": [{"role": "user", "content": "caf\\u00e9 \\u0000"}] }'
    rec = inference(request=JsonText(body), canonical_request=JsonText(b'{"model":"m"}'))
    await store_backend.insert_inferences([rec])
    (row,) = await read_all(store_backend)
    expected: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": "café \x00"}],
    }
    if store_backend.codec.dialect == "postgres":  # jsonb holds no NUL: replaced, as for dicts
        expected["messages"][0]["content"] = "café \ufffd"
    assert row.inference.request == expected
    assert row.inference.canonical_request == {"model": "m"}


def test_records_validate_on_construction():
    with pytest.raises(ValueError):
        FeedbackRecord(inference_id="x", kind="liked")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        inference(ts=datetime(2025, 1, 1))
    with pytest.raises(ValueError):
        InferenceFilter(has_feedback="liked")  # type: ignore[arg-type]
