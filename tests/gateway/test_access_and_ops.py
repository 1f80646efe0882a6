"""Who may call (keys, limits, budgets) and the ops levers (canary, shadow, learned routing),
against a real gateway with a real store."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from router.chat_text import request_text
from router.learned import Outcome, fit
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway
from traffic.store import InferenceFilter, StoreConfig, open_store

ADMIN = {"Authorization": "Bearer ops-admin"}
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def secured(frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "ops-admin")
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(
        frontier_sim.base_url, url, tmp_path / "spool", auth={"required": True, "cache_ttl_s": 0.05}
    ).start()
    yield gw, url
    gw.stop()


def _key(gw: GatewayThread, **spec: Any) -> dict[str, Any]:
    r = httpx.post(gw.base_url + "/admin/keys", json={"name": "dev", **spec}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


def test_keys_guard_the_api_and_are_shown_once(secured: Any) -> None:
    gw, url = secured
    anon = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT)
    assert anon.status_code == 401 and anon.json()["error"]["type"] == "authentication_error"
    created = _key(gw)
    key = created["key"]
    assert key.startswith("sy-") and "key_hash" not in created
    client = openai.OpenAI(base_url=gw.base_url + "/v1", api_key=key, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(**CHAT)  # type: ignore[call-overload]
    assert raw.http_response.status_code == 200
    by_header = httpx.post(
        gw.base_url + "/v1/chat/completions", json=CHAT, headers={"x-api-key": key}
    )
    assert by_header.status_code == 200
    listed = httpx.get(gw.base_url + "/admin/keys", headers=ADMIN).json()["data"]
    assert key not in json.dumps(listed)
    bad = httpx.post(
        gw.base_url + "/v1/chat/completions",
        json=CHAT,
        headers={"Authorization": "Bearer sy-not-a-real-key"},
    )
    assert bad.status_code == 401
    revoked = httpx.post(gw.base_url + f"/admin/keys/{created['id']}/revoke", headers=ADMIN)
    assert revoked.status_code == 200
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    gw.stop()
    rows = _rows(url)
    assert any(r.inference.api_key_id == created["id"] for r in rows)


def test_request_rate_limit_answers_429_with_retry_after(secured: Any) -> None:
    gw, _ = secured
    key = _key(gw, rpm_limit=2)["key"]
    h = {"Authorization": f"Bearer {key}"}
    codes = [
        httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=h) for _ in range(3)
    ]
    assert [c.status_code for c in codes] == [200, 200, 429]
    assert int(codes[-1].headers["retry-after"]) >= 1
    assert codes[-1].json()["error"]["type"] == "rate_limit_error"


def test_budget_is_enforced_from_recorded_cost(secured: Any) -> None:
    gw, _ = secured
    key = _key(gw, budget_usd=0.000001)["key"]
    h = {"Authorization": f"Bearer {key}"}
    body = {**CHAT, "model": "gpt-4o-mini"}  # priced in the test config
    first = httpx.post(gw.base_url + "/v1/chat/completions", json=body, headers=h)
    assert first.status_code == 200
    second = httpx.post(gw.base_url + "/v1/chat/completions", json=body, headers=h)
    assert second.status_code == 403
    assert second.json()["error"]["code"] == "budget_exceeded"


def test_canary_decides_its_share_then_rolls_back_or_promotes(secured: Any) -> None:
    gw, _ = secured
    key = _key(gw)["key"]
    h = {"Authorization": f"Bearer {key}"}
    routing = gw.state.config.routing.model_dump(mode="json")
    candidate = {**routing, "version": "cand-7", "default": "frontier-openai"}
    r = httpx.post(
        gw.base_url + "/admin/canary", json={"routing": candidate, "share": 1.0}, headers=ADMIN
    )
    assert r.status_code == 200, r.text
    resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=h)
    assert resp.headers["x-switchyard-policy-version"] == "cand-7"
    assert resp.headers["x-switchyard-target"] == "frontier-openai"
    httpx.post(
        gw.base_url + "/admin/canary", json={"routing": candidate, "share": 0.5}, headers=ADMIN
    )
    versions = {
        httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=h).headers[
            "x-switchyard-policy-version"
        ]
        for _ in range(16)
    }
    assert versions == {"v1", "cand-7"}
    assert httpx.delete(gw.base_url + "/admin/canary", headers=ADMIN).status_code == 200
    resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=h)
    assert resp.headers["x-switchyard-policy-version"] == "v1"
    httpx.post(
        gw.base_url + "/admin/canary", json={"routing": candidate, "share": 0.1}, headers=ADMIN
    )
    assert httpx.post(gw.base_url + "/admin/canary/promote", headers=ADMIN).status_code == 200
    resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=h)
    assert resp.headers["x-switchyard-policy-version"] == "cand-7"


def test_shadow_answers_are_recorded_for_frontier_served_requests(
    frontier_sim: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'shadow.db'}"
    gw = store_gateway(
        frontier_sim.base_url,
        url,
        tmp_path / "spool",
        auth={"required": False},
        shadow={"share": 1.0, "target": "local"},
    ).start()
    try:
        frontier = httpx.post(
            gw.base_url + "/v1/chat/completions", json={**CHAT, "model": "gpt-4o-mini"}
        )
        local = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT)
        assert frontier.status_code == local.status_code == 200
        deadline = time.monotonic() + 10
        while gw.state.shadows_in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        gw.stop()
    rows = {r.inference.id: r for r in _rows(url, with_shadows=True)}
    shadows = rows[frontier.headers["x-request-id"]].shadows
    assert len(shadows) == 1 and shadows[0].target == "local"
    assert shadows[0].response["choices"][0]["message"]["content"]
    assert rows[local.headers["x-request-id"]].shadows == []  # local answers are not shadowed
    # The draw is recorded: its probability (the full share: no score), and no skip for room.
    frontier_row = rows[frontier.headers["x-request-id"]].inference
    assert (frontier_row.shadow_p, frontier_row.shadow_skipped) == (1.0, False)
    local_row = rows[local.headers["x-request-id"]].inference
    assert (local_row.shadow_p, local_row.shadow_skipped) == (0.0, None)  # never shadowed


def test_each_canary_decision_records_its_arm_and_the_arms_probability(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "ops-admin")
    url = f"sqlite:///{tmp_path / 'canary.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool", auth={"required": False})
    gw.start()
    try:
        routing = gw.state.config.routing.model_dump(mode="json")
        candidate = {**routing, "version": "cand-9", "default": "frontier-openai"}
        r = httpx.post(
            gw.base_url + "/admin/canary", json={"routing": candidate, "share": 0.3}, headers=ADMIN
        )
        assert r.status_code == 200, r.text
        during = [httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT) for _ in range(30)]
        assert httpx.delete(gw.base_url + "/admin/canary", headers=ADMIN).status_code == 200
        after = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT)
    finally:
        gw.stop()
    rows = {r.inference.id: r.inference for r in _rows(url)}
    arms = set()
    for resp in during:
        row = rows[resp.headers["x-request-id"]]
        arm = "candidate" if resp.headers["x-switchyard-policy-version"] == "cand-9" else "live"
        assert (row.release_id, row.release_arm) == ("cand-9", arm)
        assert row.release_p == pytest.approx(0.3 if arm == "candidate" else 0.7)
        assert row.decision_kind == "default" and row.decision_target == row.route_target
        # Both arms decided: the record keeps the other one's target.
        assert row.release_other_target == ("local" if arm == "candidate" else "frontier-openai")
        arms.add(arm)
    assert arms == {"candidate", "live"}
    assert rows[after.headers["x-request-id"]].release_id is None  # no canary: no arm


def test_learned_policy_moves_a_kind_of_request_local_after_a_refit_and_reload(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Untagged requests, as real clients send them: routed by what they ask."""
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "ops-admin")
    state_file = tmp_path / "learned.json"
    learned = {
        "local_target": "local",
        "frontier_target": "frontier-openai",
        "exploration_share": 0.0,
        "min_samples": 5,
        "state_file": str(state_file),
    }
    url = f"sqlite:///{tmp_path / 'l.db'}"
    gw = store_gateway(
        frontier_sim.base_url,
        url,
        tmp_path / "spool",
        auth={"required": False},
        routing={"default": "frontier-openai", "aliases": {"auto": None}, "learned": learned},
    )
    gw.start()

    def ask(question: str, i: int) -> dict[str, Any]:
        content = f"```python\ndef f{i}(x):\n    return x\n```\n{question}"
        return {"model": "auto", "messages": [{"role": "user", "content": content}]}

    easy, hard = "What type does f return?", "Write a property-based test suite for f."
    try:
        before = httpx.post(gw.base_url + "/v1/chat/completions", json=ask(easy, 0))
        assert before.headers["x-switchyard-target"] == "frontier-openai"
        assert "no scorer fitted yet" in before.headers["x-switchyard-route-reason"]
        outcomes = []
        for i in range(60):
            for question, local_ok in ((easy, True), (hard, False)):
                text = request_text("chat.completions", ask(question, i))
                outcomes.append(Outcome("*", "local", local_ok, text=text))
                outcomes.append(Outcome("*", "frontier", True, text=text))
        state_file.write_text(json.dumps(fit(outcomes, "fit-1").to_json()))
        assert httpx.post(gw.base_url + "/admin/reload", headers=ADMIN).status_code == 200
        after = httpx.post(gw.base_url + "/v1/chat/completions", json=ask(easy, 999))
        assert after.headers["x-switchyard-target"] == "local"
        assert after.headers["x-switchyard-policy-version"] == "v1+fit-1"
        reason = after.headers["x-switchyard-route-reason"]
        assert reason.startswith("learned:local") and "scorer=fit-1" in reason
        other = httpx.post(gw.base_url + "/v1/chat/completions", json=ask(hard, 999))
        assert other.headers["x-switchyard-target"] == "frontier-openai"
        # A candidate scorer on a canary share: its own state file, where both go local.
        candidate = tmp_path / "candidate.json"
        both = [Outcome("*", o.arm, True, text=o.text) for o in outcomes]
        candidate.write_text(json.dumps(fit(both, "fit-2").to_json()))
        routing = {
            "default": "frontier-openai",
            "aliases": {"auto": None},
            "learned": {**learned, "state_file": str(candidate)},
        }
        canary = httpx.post(
            gw.base_url + "/admin/canary", json={"routing": routing, "share": 1.0}, headers=ADMIN
        )
        assert canary.status_code == 200, canary.text
        tried = httpx.post(gw.base_url + "/v1/chat/completions", json=ask(hard, 998))
        assert tried.headers["x-switchyard-target"] == "local"
        assert tried.headers["x-switchyard-policy-version"].endswith("+fit-2")
    finally:
        gw.stop()


def _rows(url: str, with_shadows: bool = False) -> list[Any]:
    async def read() -> list[Any]:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()
        try:
            return [
                r
                async for r in backend.iter_inferences(InferenceFilter(), with_shadows=with_shadows)
            ]
        finally:
            await backend.close()

    return asyncio.run(read())
