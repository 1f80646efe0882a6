"""A canary that users reject is rolled back by the release monitor, on evidence: a real gateway
(in-process, a SQLite store) with both arms deciding every request, users giving verdicts
through ``POST /v1/feedback``, the sequential test deciding, and the rollback in the change log
as ``release-monitor`` with the test's figures. A candidate as good as live is promoted where
``release.auto_promote`` is set; a canary that decides like live gets no verdict counted."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.conftest import store_gateway

ADMIN = {"Authorization": "Bearer ops-admin"}
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hello"}]}
MAX_REQUESTS = 400
PASS_MARGIN = 0.3  # a passing test's margin: an A/A at accept 1 and 0.1 needs ~450 verdicts


def _feedback(base: str, inference_id: str, kind: str) -> None:
    """A user's verdict, once the answer's record is in the store (written asynchronously)."""
    deadline = time.monotonic() + 10
    while True:
        r = httpx.post(
            base + "/v1/feedback", json={"inference_id": inference_id, "kind": kind}, timeout=10
        )
        if r.status_code == 200:
            return
        assert r.status_code == 404 and time.monotonic() < deadline, r.text
        time.sleep(0.05)


def _run(frontier_sim: Any, tmp_path: Path, candidate_accepted: bool, **release: Any) -> Any:
    """A canary on half the traffic whose default target differs from live's; users accept live's
    answers and accept or reject the candidate's. Returns (gateway, requests made, db path)."""
    db = tmp_path / "traffic.db"
    gw = store_gateway(
        frontier_sim.base_url, f"sqlite:///{db}", tmp_path / "spool",
        auth={"required": False}, release=release,
    )  # fmt: skip
    gw.start()
    routing = gw.state.config.routing.model_dump(mode="json")
    candidate = {**routing, "version": "cand", "default": "frontier-openai"}
    r = httpx.post(
        gw.base_url + "/admin/canary", json={"routing": candidate, "share": 0.5}, headers=ADMIN
    )
    assert r.status_code == 200, r.text
    made = 0
    while gw.state.decider.canary is not None and made < MAX_REQUESTS:
        resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert resp.status_code == 200, resp.text
        made += 1
        served_by_candidate = resp.headers["x-switchyard-policy-version"] == "cand"
        ok = candidate_accepted or not served_by_candidate
        _feedback(gw.base_url, resp.headers["x-request-id"], "accepted" if ok else "rejected")
        time.sleep(0.01)  # the monitor's action runs as a task
    deadline = time.monotonic() + 30  # verdicts still on their way through the recorder
    while gw.state.decider.canary is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    return gw, made, db


def _changes(db: Path) -> list[tuple[str, str, str, dict[str, Any]]]:
    with sqlite3.connect(str(db)) as conn:
        rows = conn.execute("SELECT actor, action, subject, detail FROM change_log ORDER BY ts")
        return [(a, b, c, json.loads(d)) for a, b, c, d in rows.fetchall()]


@pytest.fixture(autouse=True)
def _admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "ops-admin")


def test_a_canary_users_reject_is_rolled_back_by_the_release_monitor(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, made, db = _run(frontier_sim, tmp_path, candidate_accepted=False)
    try:
        assert gw.state.decider.canary is None, f"still running after {made} requests"
        assert made < MAX_REQUESTS
        resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert resp.headers["x-switchyard-policy-version"] != "cand"  # live decides all again
    finally:
        gw.stop()
    rollbacks = [c for c in _changes(db) if c[1] == "routing.rollback"]
    assert len(rollbacks) == 1
    actor, _, subject, detail = rollbacks[0]
    assert actor == "release-monitor" and subject.startswith("cand")
    assert detail["test"] == "sequential" and detail["delta_high"] < -detail["margin"]
    assert detail["candidate"]["accepted"] == 0 and detail["live"]["verdicts"] > 0


def test_a_candidate_as_good_as_live_is_promoted_where_asked(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, made, db = _run(
        frontier_sim, tmp_path, candidate_accepted=True, auto_promote=True, margin=PASS_MARGIN
    )
    try:
        assert gw.state.decider.canary is None and made < MAX_REQUESTS
        assert gw.state.routing.policy.version.startswith("cand")  # promoted, not dropped
    finally:
        gw.stop()
    (promotion,) = [c for c in _changes(db) if c[1] == "routing.promote"]
    # The test promotes on a lower bound above -margin; the change log keeps it to 4 places, so
    # a bound a hair above -0.3 reads -0.3 there.
    assert promotion[0] == "release-monitor" and promotion[3]["delta_low"] >= -PASS_MARGIN


def test_requests_the_arms_decide_alike_are_not_counted(frontier_sim: Any, tmp_path: Path) -> None:
    db = tmp_path / "traffic.db"
    gw = store_gateway(
        frontier_sim.base_url, f"sqlite:///{db}", tmp_path / "spool", auth={"required": False}
    )
    gw.start()
    try:
        routing = gw.state.config.routing.model_dump(mode="json")
        same = {**routing, "version": "same"}
        r = httpx.post(
            gw.base_url + "/admin/canary", json={"routing": same, "share": 0.5}, headers=ADMIN
        )
        assert r.status_code == 200
        for _ in range(20):
            resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
            _feedback(gw.base_url, resp.headers["x-request-id"], "rejected")
        monitor = gw.state.release_monitor
        assert monitor is not None and monitor.test("same") is None  # nothing to tell apart
        assert gw.state.decider.canary is not None
    finally:
        gw.stop()
