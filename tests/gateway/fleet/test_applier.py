"""How one gateway applies fleet snapshots (the local fleet: one process, no Redis): a change is
served whole, an older revision is ignored, and a document that does not validate here leaves
the gateway serving what it served (counted in ``/metrics``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.fleet.snapshot import FleetChange, FleetSnapshot, ReplicaControl, RoutingDoc
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config


@pytest.fixture
def gateway(frontier_sim: Any) -> Iterator[GatewayThread]:
    gw = GatewayThread(gateway_config(frontier_sim.base_url)).start()
    try:
        yield gw
    finally:
        gw.stop()


def _version(gw: GatewayThread) -> str:
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return r.headers["x-switchyard-policy-version"]


def test_a_published_routing_document_is_served_whole(gateway: GatewayThread) -> None:
    applier = gateway.state.reloader
    assert applier.applied.routing is not None
    sections = dict(applier.applied.routing.sections)
    sections["routing"] = {**sections["routing"], "version": "v-next"}
    snapshot = gateway.call(
        gateway.state.reloader.fleet.publish(FleetChange(routing=RoutingDoc(sections)))
    )
    assert snapshot.routing_version == 1 and _version(gateway) == "v-next"
    older = FleetSnapshot(revision=0, routing=RoutingDoc({**sections, "routing": {"default": "x"}}))
    gateway.call(applier.apply(older))  # an older revision changes nothing
    assert _version(gateway) == "v-next"


def test_a_document_that_does_not_validate_here_is_skipped_and_counted(
    gateway: GatewayThread,
) -> None:
    applier = gateway.state.reloader
    before = _version(gateway)
    bad = {**applier.applied_sections(), "routing": {"default": "no-such-target"}}
    url = gateway.state.config.backends["local"].replicas[0]
    change = FleetChange(
        routing=RoutingDoc(bad), replicas={f"local|{url}": ReplicaControl(weights_version="w9")}
    )
    gateway.call(gateway.state.reloader.fleet.publish(change))
    assert _version(gateway) == before
    assert applier.apply_failures == 1
    metrics = httpx.get(gateway.base_url + "/metrics", timeout=10).text
    assert "switchyard_fleet_apply_failures 1.0" in metrics
    # The replica controls of that revision still apply.
    assert gateway.state.targets.pools()["local"].replicas[url.rstrip("/")].weights_version == "w9"
