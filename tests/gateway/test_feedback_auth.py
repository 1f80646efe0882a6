"""Feedback is training signal: only the key that made an inference (or the admin) may give it,
and the answer never tells a stranger whether an inference id exists."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway

ADMIN = {"Authorization": "Bearer ops-admin"}
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def secured(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[GatewayThread]:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "ops-admin")
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(
        frontier_sim.base_url, url, tmp_path / "spool", auth={"required": True}
    ).start()
    yield gw
    gw.stop()


def _key(gw: GatewayThread, name: str) -> dict[str, str]:
    r = httpx.post(gw.base_url + "/admin/keys", json={"name": name}, headers=ADMIN)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['key']}"}


def _feedback(gw: GatewayThread, rid: str, headers: dict[str, str]) -> httpx.Response:
    body = {"inference_id": rid, "kind": "rejected", "payload": {"why": "poison"}}
    return httpx.post(gw.base_url + "/v1/feedback", json=body, headers=headers)


def test_feedback_needs_the_key_that_made_the_inference(secured: GatewayThread) -> None:
    gw = secured
    alice, mallory = _key(gw, "alice"), _key(gw, "mallory")
    answer = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=alice, timeout=30)
    rid = answer.headers["x-request-id"]

    no_key = _feedback(gw, rid, {})
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    bad_key = _feedback(gw, rid, {"Authorization": "Bearer sy-not-a-key"})
    assert bad_key.status_code == 401

    other = str(uuid.uuid4())
    not_yours, unknown = _feedback(gw, rid, mallory), _feedback(gw, other, mallory)
    assert not_yours.status_code == unknown.status_code == 404
    # The same answer but for the id the caller sent itself.
    assert not_yours.text.replace(rid, "ID") == unknown.text.replace(other, "ID")

    assert _feedback(gw, rid, alice).status_code == 200
    assert _feedback(gw, rid, ADMIN).status_code == 200


def test_feedback_payloads_are_bounded_like_request_bodies(secured: GatewayThread) -> None:
    gw = secured
    alice = _key(gw, "alice")
    answer = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, headers=alice, timeout=30)
    deep: Any = "x"
    for _ in range(500):
        deep = [deep]
    body = {"inference_id": answer.headers["x-request-id"], "kind": "comment", "payload": deep}
    r = httpx.post(gw.base_url + "/v1/feedback", json=body, headers=alice)
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_deep"
    ok = _feedback(gw, answer.headers["x-request-id"], alice)
    assert ok.status_code == 200
