"""Forgetting as an operator runs it: `switchyard traffic forget` on a real store (SQLite and
PostgreSQL) with a spool and an export folder, and `POST /admin/forget` on a running gateway
that recorded real exchanges."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.cli import main as cli_main
from tests.gateway.conftest import store_gateway
from tests.traffic.store.scenario import day, inference
from traffic.export import ExportConfig, SplitConfig, export_from_store
from traffic.forget import FORGET_ACTION
from traffic.store import InferenceFilter, InferenceRecord, StoreConfig, open_store
from traffic.store.console_queries import changes
from traffic.store.spool import Spool

ADMIN = {"Authorization": "Bearer forget-admin"}


def _row(key: str, n: int) -> InferenceRecord:
    return inference(
        day(n + 1),
        api_key_id=key,
        request={"model": "auto", "messages": [{"role": "user", "content": f"{key} asks {n}"}]},
        response={"choices": [{"message": {"role": "assistant", "content": f"{key} says"}}]},
    )


async def _seed(url: str, exports: Path) -> None:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        await store.insert_inferences([_row("gone", 0), _row("gone", 1), _row("kept", 2)])
        config = ExportConfig(kind="rl_prompts", out_dir=exports / "a", split=SplitConfig())
        await export_from_store(store, InferenceFilter(), config)
    finally:
        await store.close()


async def _keys_left(url: str) -> list[str | None]:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        return [r.inference.api_key_id async for r in store.iter_inferences()]
    finally:
        await store.close()


def test_the_forget_command_clears_store_spool_and_exports(
    store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exports, spool_dir = tmp_path / "exports", tmp_path / "spool"
    asyncio.run(_seed(store_url, exports))
    spool = Spool(spool_dir, 1 << 20)
    spool.append([_row("gone", 5), _row("kept", 6)])
    spool.close()
    args = ["traffic", "forget", "--store", store_url, "--key", "gone"]
    paths = ["--spool-dir", str(spool_dir), "--export-root", str(exports)]
    assert cli_main([*args, *paths, "--actor", "ops-jane"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["subject"] == "key:gone" and done["database"]["inferences"] == 2
    assert done["spool"]["segments"] == {"inference": 1}
    assert [Path(p).name for p in done["exports"]["rewritten"]] == ["a"]
    assert asyncio.run(_keys_left(store_url)) == ["kept"]
    left = "".join(p.read_text() for p in [*spool_dir.glob("*.jsonl"), *exports.rglob("*.jsonl")])
    assert "gone" not in left and "kept asks" in left
    with pytest.raises(SystemExit):
        cli_main(["traffic", "forget", "--store", store_url, "--key", "a", "--team", "b"])


async def _audit(url: str) -> list[Any]:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        return await changes(store, action_prefix=FORGET_ACTION)
    finally:
        await store.close()


def test_the_admin_api_forgets_a_recorded_exchange(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "forget-admin")
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    try:
        ids = []
        for i in range(2):
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"hi {i}"}]}
            r = httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200
            ids.append(r.headers["x-request-id"])
        db = tmp_path / "traffic.db"
        deadline = time.monotonic() + 30  # the writer's batches land when they land
        while time.monotonic() < deadline:
            with sqlite3.connect(str(db)) as conn:
                found = conn.execute("SELECT count(*) FROM inference").fetchone()[0]
            if found >= 2:
                break
            time.sleep(0.1)
        refused = httpx.post(gw.base_url + "/admin/forget", json={"inference_id": ids[0]})
        assert refused.status_code in (401, 403)
        bad = httpx.post(gw.base_url + "/admin/forget", json={}, headers=ADMIN)
        assert bad.status_code == 400
        r = httpx.post(
            gw.base_url + "/admin/forget",
            json={"inference_id": ids[0]},
            headers={**ADMIN, "X-Switchyard-Actor": "privacy-bot"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["complete"] and answer["detail"]["database"]["inferences"] == 1
    finally:
        gw.stop()
    (entry,) = asyncio.run(_audit(url))
    assert (entry.actor, entry.subject) == ("privacy-bot", f"inference:{ids[0]}")
    assert asyncio.run(_keys_left(url)) == [None]  # the other exchange stays
