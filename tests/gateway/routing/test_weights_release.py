"""A release of weights and routing together: the candidate arm's local answers come only from
replicas serving the candidate's weights and live's only from the others; a candidate whose
local answers users reject is rolled back by the release monitor (its local floor) and its
replicas are fenced until a swap puts the live weights back; a passing one moves through its
stages and is promoted, fencing the old weights; an operator can pause and resume it; a shadow
stage first has the candidate's weights answer users' requests off their path, then ends with
the candidate arm's routing refitted. A real
gateway (in-process, SQLite store) with two replicas of one local target: the frontier
simulator, reached under two addresses."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.bench.sim_gateway import simulator_backends
from tests.gateway.conftest import store_gateway
from tests.gateway.routing.test_release_monitor import ADMIN, CHAT, PASS_MARGIN, _feedback
from traffic.store.console_queries import releases

MAX_REQUESTS = 300


def _gateway(sim_url: str, tmp_path: Path, **release: Any) -> Any:
    backends = simulator_backends(sim_url)
    other = sim_url.replace("127.0.0.1", "localhost")
    backends["local"] = {**backends["local"], "replicas": [sim_url, other]}
    gw = store_gateway(
        sim_url, f"sqlite:///{tmp_path / 'traffic.db'}", tmp_path / "spool",
        auth={"required": False}, backends=backends, release=release,
        shadow={"target": "local", "share": 0.0},  # no usual shadows: a release's stage only
    )  # fmt: skip
    gw.start()
    for url, version in ((sim_url, "w1"), (other, "w2")):
        body = {"target": "local", "replica": url, "weights_version": version}
        r = httpx.post(gw.base_url + "/admin/replicas/undrain", json=body, headers=ADMIN)
        assert r.status_code == 200, r.text
    return gw, sim_url.rstrip("/"), other.rstrip("/")


def _start(gw: Any, **extra: Any) -> None:
    routing = gw.state.config.routing.model_dump(mode="json")
    body = {"routing": {**routing, "version": "cand"}, "share": 0.5, "weights_version": "w2"}
    r = httpx.post(gw.base_url + "/admin/canary", json={**body, **extra}, headers=ADMIN)
    assert r.status_code == 200, r.text


def _ask(gw: Any) -> httpx.Response:
    resp = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def _changes(db: Path) -> list[tuple[str, str, dict[str, Any]]]:
    with sqlite3.connect(str(db)) as conn:
        rows = conn.execute("SELECT actor, action, detail FROM change_log ORDER BY ts").fetchall()
        return [(a, b, json.loads(d)) for a, b, d in rows]


def _release_row(db: Path) -> tuple[str, str | None, float]:
    with sqlite3.connect(str(db)) as conn:
        query = "SELECT status, candidate_weights, share FROM routing_release"
        row = conn.execute(query).fetchone()
        return row[0], row[1], row[2]


@pytest.fixture(autouse=True)
def _admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "ops-admin")


def test_each_arm_is_served_by_its_own_weights_and_a_rejected_candidate_is_fenced(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, live_replica, candidate_replica = _gateway(frontier_sim.base_url, tmp_path)
    try:
        _start(gw)
        seen: dict[bool, set[str]] = {True: set(), False: set()}
        made = 0
        while gw.state.decider.canary is not None and made < MAX_REQUESTS:
            resp = _ask(gw)
            made += 1
            candidate = resp.headers["x-switchyard-policy-version"] == "cand"
            seen[candidate].add(resp.headers["x-switchyard-replica"])
            verdict = "rejected" if candidate else "accepted"
            _feedback(gw.base_url, resp.headers["x-request-id"], verdict)
            time.sleep(0.01)  # the monitor's action runs as a task
        assert gw.state.decider.canary is None, f"still running after {made} requests"
        assert seen == {True: {candidate_replica}, False: {live_replica}}
        pool = gw.state.targets.pools()["local"]
        assert pool.replicas[candidate_replica].drained  # the rejected weights take no traffic
        assert not pool.replicas[live_replica].drained
        for _ in range(10):
            assert _ask(gw).headers["x-switchyard-replica"] == live_replica
        (version,) = [r.id for r in gw.call(releases(gw.app.state.recorder.backend))]
        row = httpx.get(f"{gw.base_url}/admin/releases/{version}", headers=ADMIN).json()
        assert (row["status"], row["decided_by"], row["candidate_weights"]) == (
            "rolled_back", "release-monitor", "w2",
        )  # fmt: skip
        missing = httpx.get(f"{gw.base_url}/admin/releases/none", headers=ADMIN)
        assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    finally:
        gw.stop()
    db = tmp_path / "traffic.db"
    (rollback,) = [c for c in _changes(db) if c[1] == "routing.rollback"]
    actor, _, detail = rollback
    assert actor == "release-monitor" and detail["weights"] == "w2"
    assert detail["fenced"] == [candidate_replica]
    # every answer was local on both arms: the candidate's local floor caught it first
    assert detail["under_floor"] == "plain" and detail["candidate_local"]["plain"]["accepted"] == 0
    assert _release_row(db) == ("rolled_back", "w2", 0.5)


def test_a_passing_release_goes_through_its_stages_then_promotes_and_fences_the_old_weights(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, live_replica, candidate_replica = _gateway(
        frontier_sim.base_url, tmp_path, auto_promote=True, margin=PASS_MARGIN
    )
    try:
        _start(gw, share=0.5, schedule=[0.6, 1.0])
        made = 0
        while gw.state.decider.canary is not None and made < 3 * MAX_REQUESTS:
            resp = _ask(gw)
            made += 1
            _feedback(gw.base_url, resp.headers["x-request-id"], "accepted")
            time.sleep(0.01)
        assert gw.state.decider.canary is None and made < 3 * MAX_REQUESTS
        assert gw.state.routing.policy.version.startswith("cand")
        pool = gw.state.targets.pools()["local"]
        assert pool.replicas[live_replica].drained and not pool.replicas[candidate_replica].drained
        assert _ask(gw).headers["x-switchyard-replica"] == candidate_replica
    finally:
        gw.stop()
    db = tmp_path / "traffic.db"
    actions = [(a, b) for a, b, _ in _changes(db) if b.startswith("routing.")]
    monitor = [b for a, b in actions if a == "release-monitor"]
    assert monitor == ["routing.stage", "routing.promote", "routing.retire"]
    (stage,) = [d for _, b, d in _changes(db) if b == "routing.stage"]
    assert (stage["share_before"], stage["share"], stage["schedule"]) == (0.5, 0.6, [1.0])
    assert _release_row(db)[0] == "promoted"


def test_an_operator_pauses_and_resumes_a_release(frontier_sim: Any, tmp_path: Path) -> None:
    gw, live_replica, candidate_replica = _gateway(frontier_sim.base_url, tmp_path)
    try:
        _start(gw)
        r = httpx.post(gw.base_url + "/admin/canary/pause", headers=ADMIN)
        assert r.status_code == 200 and r.json()["paused"] is True, r.text
        paused = {_ask(gw).headers["x-switchyard-replica"] for _ in range(20)}
        assert paused == {live_replica}  # no one on the candidate, live still off its weights
        assert _release_row(tmp_path / "traffic.db")[0] == "paused"
        r = httpx.post(gw.base_url + "/admin/canary/resume", headers=ADMIN)
        assert r.status_code == 200 and r.json()["paused"] is False
        resumed = {_ask(gw).headers["x-switchyard-replica"] for _ in range(30)}
        assert resumed == {live_replica, candidate_replica}
        assert _release_row(tmp_path / "traffic.db")[0] == "running"
    finally:
        gw.stop()
    actions = [b for _, b, _ in _changes(tmp_path / "traffic.db")]
    assert "routing.pause" in actions and "routing.resume" in actions


def _shadows(db: Path) -> list[tuple[str, dict[str, Any]]]:
    with sqlite3.connect(str(db)) as conn:
        rows = conn.execute("SELECT inference_id, comparison FROM shadow").fetchall()
        return [(i, json.loads(c)) for i, c in rows]


def test_a_shadow_stage_answers_on_the_candidate_weights_then_resumes_with_refitted_routing(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, live_replica, candidate_replica = _gateway(frontier_sim.base_url, tmp_path)
    db = tmp_path / "traffic.db"
    try:
        _start(gw, shadow=1.0)
        assert _release_row(db)[0] == "shadow"
        served = [_ask(gw) for _ in range(12)]
        assert {r.headers["x-switchyard-replica"] for r in served} == {live_replica}
        ids = {r.headers["x-request-id"] for r in served}
        deadline = time.monotonic() + 10
        while len(_shadows(db)) < len(ids) and time.monotonic() < deadline:
            time.sleep(0.1)  # shadows run after the answer, then the writer's batch
        shadows = _shadows(db)
        assert {i for i, _ in shadows} == ids  # every request, at share 1
        assert {(c["replica"].rstrip("/"), c["weights_version"]) for _, c in shadows} == {
            (candidate_replica, "w2")
        }
        refitted = {"version": "fit-cand", "classes": {}}
        r = httpx.post(
            gw.base_url + "/admin/canary/resume",
            json={"learned_state": {"bogus": 1}},
            headers=ADMIN,
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
        r = httpx.post(
            gw.base_url + "/admin/canary/resume", json={"learned_state": refitted}, headers=ADMIN
        )
        assert r.status_code == 200 and r.json()["paused"] is False, r.text
        assert gw.state.decider.canary is not None and gw.state.decider.canary.shadow == 0
        resumed = {_ask(gw).headers["x-switchyard-replica"] for _ in range(30)}
        assert resumed == {live_replica, candidate_replica}
        assert len(_shadows(db)) == len(ids)  # the stage is over: no more shadows
        assert _release_row(db)[0] == "running"
    finally:
        gw.stop()
    (resume,) = [d for _, b, d in _changes(db) if b == "routing.resume"]
    assert resume["shadow_ended"] is True and resume["refitted"] is True


def test_a_release_naming_weights_no_replica_serves_is_refused(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, _, _ = _gateway(frontier_sim.base_url, tmp_path)
    try:
        routing = gw.state.config.routing.model_dump(mode="json")
        for extra in ({"weights_version": "w9"}, {"schedule": [0.4]}, {"shadow": 0.5}):
            body = {"routing": {**routing, "version": "cand"}, "share": 0.5, **extra}
            r = httpx.post(gw.base_url + "/admin/canary", json=body, headers=ADMIN)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["type"] == "invalid_request_error"
        r = httpx.post(gw.base_url + "/admin/canary/pause", headers=ADMIN)
        assert r.status_code == 404
    finally:
        gw.stop()


def test_a_release_dropped_with_a_reason_keeps_it_in_the_change_log(
    frontier_sim: Any, tmp_path: Path
) -> None:
    gw, _, candidate_replica = _gateway(frontier_sim.base_url, tmp_path)
    try:
        _start(gw, shadow=1.0)
        reason = "shadow stage: the candidate's weights are worse on naming"
        r = httpx.delete(
            gw.base_url + "/admin/canary",
            params={"reason": reason},
            headers={**ADMIN, "x-switchyard-actor": "flywheel"},
        )
        assert r.status_code == 200 and r.json()["dropped"] == "cand", r.text
        assert gw.state.targets.pools()["local"].replicas[candidate_replica].drained
    finally:
        gw.stop()
    (rollback,) = [
        (a, d) for a, b, d in _changes(tmp_path / "traffic.db") if b == "routing.rollback"
    ]
    assert rollback[0] == "flywheel" and rollback[1]["reason"] == reason
    assert _release_row(tmp_path / "traffic.db")[0] == "rolled_back"
