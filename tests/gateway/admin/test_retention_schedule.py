"""A gateway recording into a store runs the retention pass itself: a record past the store's
window is deleted, with the audit entry, while the gateway serves, and a recent one stays."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.gateway.conftest import store_gateway
from tests.traffic.store.scenario import inference
from traffic.retention import RETENTION_ACTION
from traffic.store import InferenceRecord, StoreConfig, open_store
from traffic.store.console_queries import changes


def _row(age_days: int) -> InferenceRecord:
    return inference(
        datetime.now(UTC) - timedelta(days=age_days),
        request={"model": "auto", "messages": [{"role": "user", "content": f"{age_days} ago"}]},
        response={"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
    )


async def _seed(url: str) -> None:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        await store.insert_inferences([_row(10), _row(0)])
    finally:
        await store.close()


async def _left(url: str) -> tuple[list[str], int]:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        asked = [json.dumps(r.inference.request) async for r in store.iter_inferences()]
        entries = await changes(store, action_prefix=RETENTION_ACTION)
        return asked, len(entries)
    finally:
        await store.close()


def test_a_recording_gateway_deletes_what_is_past_the_window_on_its_own(
    frontier_sim: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    asyncio.run(_seed(url))
    gw = store_gateway(
        frontier_sim.base_url,
        url,
        tmp_path / "spool",
        store__retention_days=3,
        store__retention_interval_s=0.5,
    )
    gw.start()
    try:
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30).is_success
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            asked, audits = asyncio.run(_left(url))
            if "10 ago" not in "".join(asked) and audits:
                break
            time.sleep(0.2)
    finally:
        gw.stop()
    asked, audits = asyncio.run(_left(url))
    assert len(asked) == 2 and "10 ago" not in "".join(asked)  # the recent row and the call
    assert audits == 1
