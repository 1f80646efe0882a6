"""The traffic record end to end: real gateway, real store (SQLite and PostgreSQL), feedback,
and a database cut under load after which every answer the clients got has exactly one record."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.postgres_fixture import pg_dsn
from tests.gateway.conftest import store_gateway as _store_gateway
from tests.traffic.store.tcp_proxy import TcpProxy
from traffic.store import InferenceFilter, InferenceRow, StoreConfig, open_store


def _read_all(url: str) -> list[InferenceRow]:
    async def read() -> list[InferenceRow]:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()
        try:
            return [row async for row in backend.iter_inferences(InferenceFilter())]
        finally:
            await backend.close()

    return asyncio.run(read())


def _chat(gw: GatewayThread, **kw: Any) -> httpx.Response:
    body = {"model": "auto", "messages": [{"role": "user", "content": "record me"}], **kw}
    return httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30)


def test_every_exchange_is_recorded_once_with_its_feedback(
    frontier_sim: Any, store_url: str, tmp_path: Path
) -> None:
    gw = _store_gateway(frontier_sim.base_url, store_url, tmp_path / "spool").start()
    try:
        ok = _chat(gw)
        streamed = _chat(gw, stream=True)
        frontier = _chat(gw, model="gpt-4o-mini", metadata={"task": "rename"})
        bad = _chat(gw, temperature=9)
        episode = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "turn 1"}]},
            headers={"x-switchyard-episode": "session-42"},
        )
        fb = gw.base_url + "/v1/feedback"
        rid = ok.headers["x-request-id"]
        assert httpx.post(fb, json={"inference_id": rid, "kind": "accepted"}).status_code == 200
        edited = {"inference_id": rid, "kind": "edited", "payload": {"text": "better"}}
        assert httpx.post(fb, json=edited).status_code == 200
        unknown = httpx.post(fb, json={"inference_id": str(uuid.uuid4()), "kind": "accepted"})
        assert (
            unknown.status_code == 404 and unknown.json()["error"]["code"] == "inference_not_found"
        )
        badkind = httpx.post(fb, json={"inference_id": rid, "kind": "loved"})
        assert badkind.status_code == 400 and badkind.json()["error"]["param"] == "kind"
        noscore = httpx.post(fb, json={"inference_id": rid, "kind": "score"})
        assert noscore.status_code == 400
    finally:
        gw.stop()  # graceful: the writer flushes
    rows = {r.inference.id: r for r in _read_all(store_url)}
    responses = [ok, streamed, frontier, bad, episode]
    assert set(rows) == {r.headers["x-request-id"] for r in responses}
    first = rows[rid]
    assert first.inference.route_target == "local" and first.inference.status == 200
    assert first.inference.response is not None
    assert sorted(f.kind for f in first.feedback) == ["accepted", "edited"]
    s = rows[streamed.headers["x-request-id"]].inference
    assert s.stream and s.response is not None
    assert s.response["choices"][0]["message"]["content"].startswith("Simulated")
    f = rows[frontier.headers["x-request-id"]].inference
    assert f.route_target == "frontier-openai" and f.cost_usd and f.cost_usd > 0
    assert f.tags == {"task": "rename"}
    assert rows[bad.headers["x-request-id"]].inference.status == 400
    assert rows[episode.headers["x-request-id"]].inference.episode_id == "session-42"


@pytest.mark.postgres
def test_database_cut_under_load_loses_no_record(
    frontier_sim: Any, pg_schema: str, tmp_path: Path
) -> None:
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(30)

    proxy = on_loop(_make_proxy())
    schema = pg_schema
    url = pg_dsn(schema, f"postgresql://postgres@127.0.0.1:{proxy.port}/test")
    gw = _store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    got: list[str] = []
    stop_at = time.monotonic() + 30
    restored = threading.Event()

    def client(n: int) -> None:
        # Load until the database is back and then some (bounded by n and stop_at): a fixed
        # request count finished before the cut on a quiet machine.
        after = 0
        with httpx.Client(timeout=30) as c:
            for i in range(n):
                if time.monotonic() > stop_at or after >= 20:
                    return
                after += restored.is_set()
                body = {
                    "model": "auto",
                    "stream": i % 3 == 0,
                    "messages": [{"role": "user", "content": f"load {i}"}],
                }
                r = c.post(gw.base_url + "/v1/chat/completions", json=body)
                got.append(r.headers["x-request-id"])

    try:
        with ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(client, 2000) for _ in range(6)]
            while len(got) < 60 and time.monotonic() < stop_at:  # the load is under way
                time.sleep(0.01)
            on_loop(proxy.stop())  # the database vanishes mid-load
            time.sleep(2.0)
            on_loop(proxy.start())  # and comes back on the same port
            restored.set()
            for fut in futures:
                fut.result()
        assert len(got) >= 60 + 6 * 20
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            stats = gw.state.recorder.stats()  # type: ignore[union-attr]
            if stats.get("replayed_total", 0) and stats.get("spooled_total", 0) == stats.get(
                "replayed_total"
            ):
                break
            time.sleep(0.2)
        spooled = gw.state.recorder.stats().get("spooled_total", 0)  # type: ignore[union-attr]
    finally:
        gw.stop()
        on_loop(proxy.stop())
        loop.call_soon_threadsafe(loop.stop)
    assert spooled > 0, "the cut should have sent records to the spool"
    ids = [r.inference.id for r in _read_all(pg_dsn(schema))]
    assert len(ids) == len(set(ids))
    assert set(got) <= set(ids)
    assert len(set(got)) == len(got)


async def _make_proxy() -> TcpProxy:
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()
    return proxy
