"""A replica's answers carry the version of the weights it serves: the gateway asks the replica
(`GET /weight_info`) when it joins and whenever it comes back, so a pod restarted onto other
weights than the last hot swap installed is tagged with what it loaded, and a fleet change that
re-applies an old control does not put the stale version back. A replica with no word of its own
(no such route, or vLLM's unset `"default"`) keeps the version operators declared."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
from aiohttp import web

from gateway.backends.replica_pool import ReplicaState
from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.loopback_provider import loopback_gateway
from tests.fixtures.loopback_server import LoopbackServer
from tests.gateway.test_replica_health import ANSWER

DECLARED = "w-config"  # the config's weights_version
VLLM_UNSET = "default"


def wait_for(condition: Callable[[], bool], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.01)


def state(gw: GatewayThread) -> ReplicaState:
    (only,) = gw.state.targets.pools()["local"].replicas.values()
    return only


class Replica:
    """A vLLM replica on loopback: `/health` answers `health_status`; `/weight_info` answers
    `{"weight_version": version}`, or 404 when `version` is None (vLLM without its dev routes)."""

    def __init__(self, version: str | None) -> None:
        self.version = version
        self.health_status = 200
        self.reads = 0  # of /weight_info
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/weight_info", self._weight_info)
        app.router.add_post("/v1/chat/completions", self._chat)
        self.server = LoopbackServer(app, "replica")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=self.health_status, text="")

    async def _weight_info(self, request: web.Request) -> web.Response:
        self.reads += 1
        if self.version is None:
            return web.Response(status=404, text="")
        return web.json_response({"weight_version": self.version})

    async def _chat(self, request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(ANSWER)

    def restart(self, gw: GatewayThread, version: str | None) -> None:
        """Down until the gateway saw it, then back serving `version` (a pod restarted by
        Kubernetes onto what its model path holds now)."""
        self.health_status = 503
        wait_for(lambda: not state(gw).healthy)
        self.version = version
        self.health_status = 200
        wait_for(lambda: state(gw).healthy)


@contextmanager
def replica_gateway(version: str | None) -> Iterator[tuple[GatewayThread, Replica]]:
    replica = Replica(version)
    replica.server.start()
    local = {
        "kind": "vllm",
        "model": "m",
        "replicas": [replica.server.url],
        "weights_version": DECLARED,
        "health": {"interval_s": 0.05, "timeout_s": 1.0},
    }
    try:
        with loopback_gateway(
            {"local": local}, {"default": "local", "aliases": {"m": "local"}}
        ) as gw:
            wait_for(lambda: replica.reads >= 1)  # asked when the gateway started
            wait_for(lambda: not state(gw).version_unread)
            yield gw, replica
    finally:
        replica.server.stop()


def tag(gw: GatewayThread) -> str:
    """The weights version the gateway puts on an answer of the replica."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(base_url=gw.base_url, timeout=30) as client:
        got = client.post("/v1/chat/completions", json=body)
    assert got.status_code == 200, got.text
    return got.headers["x-switchyard-weights-version"]


def test_a_replica_is_tagged_with_the_version_it_reports_when_the_gateway_starts() -> None:
    with replica_gateway("w-served") as (gw, _):
        assert state(gw).weights_version == "w-served"
        assert tag(gw) == "w-served"


def test_a_replica_restarted_onto_other_weights_is_tagged_with_them_as_it_returns() -> None:
    with replica_gateway(VLLM_UNSET) as (gw, replica):
        assert tag(gw) == DECLARED  # vLLM's unset value is no word of its own
        replica.restart(gw, "w-restarted")
        # Read before it took traffic again: no answer of the new weights had the old tag.
        assert state(gw).weights_version == "w-restarted"
        assert tag(gw) == "w-restarted"


def test_a_replica_without_a_version_of_its_own_keeps_the_declared_one() -> None:
    with replica_gateway(None) as (gw, replica):
        replica.restart(gw, VLLM_UNSET)
        assert replica.reads == 2  # asked at the start and on its return
        assert state(gw).weights_version == DECLARED and tag(gw) == DECLARED


def test_a_fleet_change_does_not_put_back_a_version_the_returned_replica_disproved() -> None:
    with replica_gateway(VLLM_UNSET) as (gw, replica):
        reloader = gw.state.reloader
        url = replica.server.url
        pool = gw.state.targets.pools()["local"]
        # A hot swap: the replica is told its new version, then undrained with it.
        gw.call(reloader.drain("local", url, 5.0))
        replica.version = "w-swapped"
        gw.call(reloader.undrain("local", url, "w-swapped"))
        assert tag(gw) == "w-swapped"
        # Restarted onto the weights its model path still holds: the swap never moved it.
        replica.restart(gw, "w-old")
        revision = reloader.applied.revision
        gw.call(reloader.reload())  # the fleet re-applies every control, w-swapped's included
        assert reloader.applied.revision > revision and gw.state.targets.pools()["local"] is pool
        assert state(gw).weights_version == "w-old" and tag(gw) == "w-old"
        # Swapped again to the version declared before: undrained, it is asked again.
        gw.call(reloader.drain("local", url, 5.0))
        replica.version = "w-swapped"
        gw.call(reloader.undrain("local", url, "w-swapped"))
        wait_for(lambda: state(gw).weights_version == "w-swapped")
        assert tag(gw) == "w-swapped"
