"""Consent through a real gateway with a real store: each exchange's record is stamped with its
key's ``training_use`` (its own, else its team's, else ``auth.training_use``, which anonymous
calls take too); the admin API shows and sets it per key and per team, a change applies to the
next call, and every change is in the change log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway
from traffic.store import StoreConfig, open_store
from traffic.store.console_queries import changes
from traffic.store.records import ChangeRecord, InferenceRecord

ADMIN = {"Authorization": "Bearer consent-admin"}
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hello"}]}


def _read(url: str) -> tuple[list[InferenceRecord], list[ChangeRecord]]:
    async def read() -> tuple[list[InferenceRecord], list[ChangeRecord]]:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()
        try:
            rows = [r.inference async for r in backend.iter_inferences()]
            return rows, await changes(backend, limit=100)
        finally:
            await backend.close()

    return asyncio.run(read())


def _gateway(sim: Any, tmp_path: Path, url: str, **auth: Any) -> GatewayThread:
    return store_gateway(sim.base_url, url, tmp_path / "spool", auth=auth).start()


def test_each_record_is_stamped_with_its_keys_consent(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "consent-admin")
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = _gateway(frontier_sim, tmp_path, url, required=True, training_use="redact")
    admin = httpx.Client(base_url=gw.base_url, headers=ADMIN, timeout=30)
    try:

        def key(**spec: Any) -> dict[str, Any]:
            created = admin.post("/admin/keys", json={"name": "k", **spec})
            assert created.status_code == 201, created.text
            return created.json()  # type: ignore[no-any-return]

        def call(k: dict[str, Any]) -> str:
            headers = {"Authorization": f"Bearer {k['key']}"}
            answer = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=headers)
            assert answer.status_code == 200, answer.text
            return k["id"]  # type: ignore[no-any-return]

        team = admin.put("/admin/teams/platform", json={"training_use": "deny"})
        assert team.status_code == 200 and team.json()["training_use"] == "deny"
        own = key(training_use="allow", team_id="platform")
        member = key(team_id="platform")
        default = key()
        assert own["training_use"] == "allow" and member["team_id"] == "platform"
        expected = {call(own): "allow", call(member): "deny", call(default): "redact"}
        patched = admin.patch(f"/admin/keys/{default['id']}", json={"training_use": "deny"})
        assert patched.status_code == 200 and patched.json()["training_use"] == "deny"
        assert patched.json()["team_id"] is None  # a field not given stays
        later = call(default)
        listed = {k["id"]: k for k in admin.get("/admin/keys").json()["data"]}
        assert listed[default["id"]]["training_use"] == "deny"
        assert admin.get("/admin/teams").json()["data"][0]["id"] == "platform"
        bad = admin.patch(f"/admin/keys/{own['id']}", json={"training_use": "sometimes"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "training_use"
        assert admin.patch("/admin/keys/nope", json={"team_id": None}).status_code == 404
        assert admin.put("/admin/teams/no spaces", json={"training_use": None}).status_code == 400
    finally:
        admin.close()
        gw.stop()
    rows, logged = _read(url)
    stamped = {r.api_key_id: r.training_use for r in rows if r.api_key_id != default["id"]}
    assert stamped == {k: v for k, v in expected.items() if k != default["id"]}
    mine = sorted((r for r in rows if r.api_key_id == default["id"]), key=lambda r: r.id)
    assert [r.training_use for r in mine] == ["redact", "deny"]  # the change applied at once
    actions = [
        (c.action, c.subject) for c in reversed(logged) if c.action.startswith(("key", "team"))
    ]
    assert actions[0] == ("team.consent", "platform")
    assert ("key.consent", later) in actions
    consent = next(c for c in logged if c.action == "key.consent")
    assert consent.actor == "admin-api" and consent.detail["before"]["training_use"] is None
    created = next(c for c in logged if c.action == "key.create" and c.subject == own["id"])
    assert created.detail["training_use"] == "allow" and created.detail["team_id"] == "platform"


def test_anonymous_calls_take_the_configured_default(frontier_sim: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = _gateway(frontier_sim, tmp_path, url, required=False, training_use="deny")
    try:
        assert httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT).status_code == 200
    finally:
        gw.stop()
    rows, _ = _read(url)
    assert [r.training_use for r in rows] == ["deny"]
