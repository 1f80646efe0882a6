"""The loop's release stage against a real gateway (in-process, SQLite store): the candidate's
weights on one of two replicas, its routing as a canary arm, users' verdicts deciding, then the
other replica swapped forward (promoted) or the canary replica swapped back (rolled back, by
the release monitor or, when the traffic ends undecided, by the loop itself). The replicas are
the frontier simulator under two addresses, and the weight swap is replaced by its gateway side
(drain, then undrain tagged with the new version): tests/serving/test_hotswap.py runs the real
one on vLLM."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.bench.sim_gateway import simulator_backends
from rl_loop import release_stage
from rl_loop.config import LoopConfig
from rl_loop.model_registry import list_checkpoints, record_checkpoint
from rl_loop.release_stage import ReleaseOutcome, release_candidate, release_figures
from router.learned import LearnedState
from serving.build import read_version
from serving.hotswap import HotSwapConfig, ReplicaSwap, SwapReport
from tests.gateway.conftest import store_gateway
from tests.gateway.routing.test_release_monitor import CHAT
from tests.rl_loop.test_promote import checkpoint
from traffic.store import StoreBackend, StoreConfig, open_store

TOKEN = "ops-admin"


@pytest.fixture(autouse=True)
def _admin_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", TOKEN)


@pytest.fixture
def swaps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, ...]]]:
    """The hot-swap's gateway side: each replica drained, then undrained with the new version."""
    calls: list[tuple[str, tuple[str, ...]]] = []

    async def fake(checkpoint_dir: Path, previous: Path, replicas: Any, config: Any) -> SwapReport:
        version = read_version(checkpoint_dir).version_id
        headers = {"authorization": f"Bearer {config.admin_token}"}
        async with httpx.AsyncClient(base_url=config.gateway_url, headers=headers) as client:
            for url in replicas:
                body = {"target": "local", "replica": url, "timeout_s": 5}
                assert (await client.post("/admin/replicas/drain", json=body)).status_code == 200
                body = {"target": "local", "replica": url, "weights_version": version}
                assert (await client.post("/admin/replicas/undrain", json=body)).status_code == 200
        calls.append((version, tuple(replicas)))
        report = SwapReport(version, read_version(previous).version_id)
        report.replicas = [ReplicaSwap(r, "swapped") for r in replicas]
        return report

    monkeypatch.setattr(release_stage, "publish_weights", fake)
    return calls


def _users(base: str, sent: list[str], candidate_accepted: bool) -> release_stage.Drive:
    """Users who accept live's answers, and the candidate arm's as told (at most 600)."""

    async def drive(stop: asyncio.Event) -> None:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            while not stop.is_set() and len(sent) < 600:
                resp = await client.post("/v1/chat/completions", json=CHAT)
                assert resp.status_code == 200, resp.text
                # no replica: answered down the chain, the arm's replica fenced as the release
                # ended (a request decided just before)
                sent.append(resp.headers.get("x-switchyard-replica", ""))
                candidate = resp.headers["x-switchyard-policy-version"].startswith("release-")
                ok = candidate_accepted or not candidate
                body = {"inference_id": resp.headers["x-request-id"]}
                body["kind"] = "accepted" if ok else "rejected"
                for _ in range(100):  # the record is written asynchronously
                    if (await client.post("/v1/feedback", json=body)).status_code == 200:
                        break
                    await asyncio.sleep(0.05)

    return drive


async def _release(
    frontier_sim: Any,
    tmp_path: Path,
    users: Callable[[str, list[str]], release_stage.Drive],
    refit: release_stage.Refit | None = None,
) -> tuple[Any, StoreBackend, list[str], ReleaseOutcome, tuple[str, str]]:
    """A release of ft-1 over base-1 on two replicas, users as given (with ``refit``, a shadow
    stage first, on the same users); returns the gateway (running: stop it), the store (open:
    close it), the replicas users were answered by, the outcome and the replicas (live's
    first)."""
    backends = simulator_backends(frontier_sim.base_url)
    one, two = frontier_sim.base_url, frontier_sim.base_url.replace("127.0.0.1", "localhost")
    backends["local"] = {**backends["local"], "replicas": [one, two]}
    db = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(
        frontier_sim.base_url, db, tmp_path / "spool", auth={"required": False},
        backends=backends, release={"auto_promote": True},
        shadow={"target": "local", "share": 0.0},
    )  # fmt: skip
    gw.start()
    store = open_store(StoreConfig(url=db))
    await store.connect()
    served = checkpoint(tmp_path, "base-1", None, 0)
    candidate = checkpoint(tmp_path, "ft-1", "base-1", 1)
    await record_checkpoint(store, served, "promoted")
    state = tmp_path / "candidate_state.json"
    state.write_text(json.dumps(LearnedState("fit-candidate").to_json()))
    release = {"enabled": True, "share": 0.5, "poll_s": 0.1, "shadow": 1.0 if refit else 0.0}
    config = LoopConfig(work_dir=tmp_path, release=release)
    swap = HotSwapConfig(gateway_url=gw.base_url, admin_token=TOKEN)
    sent: list[str] = []
    replicas = (one.rstrip("/"), two.rstrip("/"))
    try:
        drive = users(gw.base_url, sent)
        traffic = release_stage.ReleaseTraffic(drive, drive if refit else None)
        outcome = await release_candidate(
            0, candidate, served, replicas, state, store, swap, config, traffic, refit
        )
    except BaseException:
        gw.stop()
        await store.close()
        raise
    return gw, store, sent, outcome, replicas


async def _written(store: StoreBackend, n: int) -> None:
    """Until the writer has stored ``n`` exchanges with their feedback (it batches)."""
    for _ in range(200):
        judged = [r async for r in store.iter_inferences() if r.feedback]
        if len(judged) >= n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(judged)} of {n} judged exchanges written")


async def _registry(store: StoreBackend) -> dict[str, str]:
    return {r.id: r.status for r in await list_checkpoints(store)}


def _pool(gw: Any) -> dict[str, tuple[str | None, bool]]:
    return {
        u: (r.weights_version, r.drained)
        for u, r in gw.state.targets.pools()["local"].replicas.items()
    }


async def test_a_candidate_users_reject_is_rolled_back_and_its_replica_swapped_back(
    frontier_sim: Any, tmp_path: Path, swaps: list[tuple[str, tuple[str, ...]]]
) -> None:
    since = datetime.now(UTC)
    users = functools.partial(_users, candidate_accepted=False)
    gw, store, sent, outcome, (live, canary) = await _release(frontier_sim, tmp_path, users)
    try:
        assert (outcome.status, outcome.decided_by, outcome.timed_out) == (
            "rolled_back", "release-monitor", False,
        )  # fmt: skip
        assert swaps == [("ft-1", (canary,)), ("base-1", (canary,))]
        assert _pool(gw) == {live: (None, False), canary: ("base-1", False)}
        assert await _registry(store) == {"base-1": "promoted", "ft-1": "rejected"}
        assert gw.state.decider.canary is None and len(sent) < 600
        await _written(store, len(sent))
        figures = await release_figures(store, since, outcome.release_id, "local")
        assert figures["accept"]["candidate"] == 0 and figures["accept"]["live"] == 1
        assert figures["harm"] == 0.5  # share x (1 - 0): every differing answer rejected
    finally:
        gw.stop()
        await store.close()


async def test_a_candidate_users_accept_is_promoted_and_the_other_replica_swapped_forward(
    frontier_sim: Any, tmp_path: Path, swaps: list[tuple[str, tuple[str, ...]]]
) -> None:
    users = functools.partial(_users, candidate_accepted=True)
    gw, store, sent, outcome, (live, canary) = await _release(frontier_sim, tmp_path, users)
    try:
        assert (outcome.status, outcome.decided_by) == ("promoted", "release-monitor")
        assert swaps == [("ft-1", (canary,)), ("ft-1", (live,))]
        assert _pool(gw) == {live: ("ft-1", False), canary: ("ft-1", False)}
        assert await _registry(store) == {"base-1": "retired", "ft-1": "promoted"}
        assert gw.state.routing.policy.version.startswith(outcome.release_id)
        assert set(sent) - {""} == {live, canary}
    finally:
        gw.stop()
        await store.close()


async def test_a_release_the_traffic_cannot_decide_is_rolled_back_by_the_loop(
    frontier_sim: Any, tmp_path: Path, swaps: list[tuple[str, tuple[str, ...]]]
) -> None:
    def few_users(base: str, sent: list[str]) -> release_stage.Drive:
        async def drive(stop: asyncio.Event) -> None:  # three requests, no verdict: no evidence
            async with httpx.AsyncClient(base_url=base, timeout=30) as client:
                for _ in range(3):
                    resp = await client.post("/v1/chat/completions", json=CHAT)
                    sent.append(resp.headers["x-switchyard-replica"])

        return drive

    gw, store, sent, outcome, (live, canary) = await _release(frontier_sim, tmp_path, few_users)
    try:
        assert (outcome.status, outcome.decided_by, outcome.timed_out) == (
            "rolled_back", "flywheel", True,
        )  # fmt: skip
        assert swaps[-1] == ("base-1", (canary,)) and len(sent) == 3
        assert _pool(gw) == {live: (None, False), canary: ("base-1", False)}
    finally:
        gw.stop()
        await store.close()


def _shadow_users(base: str, sent: list[str]) -> release_stage.Drive:
    """Ten requests, no verdict (the shadow stage's), then users accepting every answer."""
    calls = 0

    async def drive(stop: asyncio.Event) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            return await _users(base, sent, candidate_accepted=True)(stop)
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            for _ in range(10):
                resp = await client.post("/v1/chat/completions", json=CHAT)
                sent.append(resp.headers["x-switchyard-replica"])
        return None

    return drive


async def test_a_shadow_stage_hands_the_refitted_routing_to_the_candidate_arm(
    frontier_sim: Any, tmp_path: Path, swaps: list[tuple[str, tuple[str, ...]]]
) -> None:
    windows: list[datetime] = []

    async def refit(since: datetime) -> release_stage.Refitted:
        windows.append(since)
        return release_stage.Refitted(LearnedState("fit-on-shadows").to_json())

    gw, store, sent, outcome, (live, canary) = await _release(
        frontier_sim, tmp_path, _shadow_users, refit
    )
    try:
        assert outcome.status == "promoted" and outcome.decided_by == "release-monitor"
        assert outcome.shadow["routing"] == "fit-on-shadows" and len(windows) == 1
        assert set(sent[:10]) == {live}  # the shadow stage: no user on the candidate's replica
        assert canary in sent[10:]
    finally:
        gw.stop()
        await store.close()


async def test_a_shadow_stage_that_finds_a_regression_rolls_the_release_back(
    frontier_sim: Any, tmp_path: Path, swaps: list[tuple[str, tuple[str, ...]]]
) -> None:
    async def refit(since: datetime) -> release_stage.Refitted:
        worse = {"naming": {"candidate_bounds": [0.0, 0.2], "served_bounds": [0.8, 0.95]}}
        return release_stage.Refitted(LearnedState("fit-on-shadows").to_json(), worse)

    gw, store, sent, outcome, (live, canary) = await _release(
        frontier_sim, tmp_path, _shadow_users, refit
    )
    try:
        assert (outcome.status, outcome.decided_by, outcome.timed_out) == (
            "rolled_back", "flywheel", False,
        )  # fmt: skip
        assert "naming" in outcome.decision["reason"] and outcome.shadow["regressions"]
        assert set(sent) == {live} and len(sent) == 10  # no user ever reached the candidate
        assert swaps[-1] == ("base-1", (canary,))
    finally:
        gw.stop()
        await store.close()
