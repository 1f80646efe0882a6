"""Operator changes made through one gateway are served by every gateway of the fleet: replica
drain and undrain (with the weights version), reloads with a refitted learned state, canaries.

Three real gateway processes on one Redis fleet (package fixture), two simulated replicas.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from rl_loop.refit_cli import reload_fleet
from router.learned import LearnedState
from serving.hotswap import HotSwapConfig, _Publisher
from tests.gateway.fleet.harness import (
    ADMIN,
    ADMIN_TOKEN,
    Fleet,
    Load,
    RoundRobin,
    check_drain_stops_new_work,
    sim_requests,
    wait_until,
)

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_every_gateway_process_is_a_member_of_one_fleet(fleet: Fleet) -> None:
    views = [g.fleet() for g in fleet.gateways]
    members = {v["member"] for v in views}
    assert len(members) == len(fleet.gateways)
    wait_until(
        lambda: all(set(g.fleet()["members"]) == members for g in fleet.gateways),
        10,
        "every gateway sees every member",
    )
    assert len({(v["epoch"], v["policy_version"]) for v in views}) == 1


def test_a_drain_through_one_gateway_stops_every_gateway_routing_to_the_replica(
    fleet: Fleet,
) -> None:
    drained = fleet.replicas[1]
    with Load(fleet) as load:
        check_drain_stops_new_work(fleet, drained, sim_requests, "w-fleet-2", load)
    # Every gateway now tags the replica's answers with the version given through one of them.
    client = RoundRobin(fleet.urls)
    versions = set()
    for turn in range(30):
        _, r = client.chat(f"after undrain {turn}", episode=f"undrain-{turn}")
        if r.headers["x-switchyard-replica"] == drained:
            versions.add(r.headers["x-switchyard-weights-version"])
    client.close()
    assert versions == {"w-fleet-2"}


def _policy_versions(fleet: Fleet, turns: int = 9) -> set[str]:
    client = RoundRobin(fleet.urls)
    seen = set()
    for turn in range(turns):
        _, r = client.chat(f"policy {turn}")
        assert r.status_code == 200, r.text
        seen.add(r.headers["x-switchyard-policy-version"])
    client.close()
    return seen


def test_a_reload_with_a_refitted_state_through_one_gateway_is_served_by_all(
    fleet: Fleet,
) -> None:
    # The new config and the fitted state exist on gateway 0's disk only: the other gateways can
    # only learn of them through the fleet.
    first = fleet.gateways[0]
    config = fleet.configs[0]
    config["routing"]["version"] = "v2"
    state_file = Path(config["routing"]["learned"]["state_file"])
    state_file.write_text(json.dumps(LearnedState("fit-fleet-2").to_json()))
    first.config_path.write_text(json.dumps(config))
    answer = first.admin("POST", "/admin/reload")
    assert answer["policy_version"] == "v2+fit-fleet-2"
    assert _policy_versions(fleet) == {"v2+fit-fleet-2"}
    assert {g.fleet()["policy_version"] for g in fleet.gateways} == {"v2+fit-fleet-2"}


def test_a_canary_set_through_one_gateway_decides_on_all_and_is_dropped_everywhere(
    fleet: Fleet,
) -> None:
    live = fleet.gateways[0].fleet()["policy_version"]
    routing = dict(fleet.configs[0]["routing"], version="canary-v9")
    routing.pop("learned")
    fleet.gateways[2].admin("POST", "/admin/canary", {"routing": routing, "share": 1.0})
    assert _policy_versions(fleet) == {"canary-v9"}
    r = httpx.delete(fleet.gateways[1].url + "/admin/canary", headers=ADMIN, timeout=30)
    assert r.status_code == 200 and r.json()["dropped"] == "canary-v9"
    assert _policy_versions(fleet) == {live}


def test_the_refit_and_hot_swap_clients_reach_the_fleet_past_a_gateway_that_is_down(
    fleet: Fleet,
) -> None:
    dead = "http://127.0.0.1:9"  # nothing listens there
    # rl_loop.refit_cli: the reload goes through the first gateway that takes it.
    version = asyncio.run(reload_fleet([dead, fleet.urls[1]], ADMIN_TOKEN))
    assert {g.fleet()["policy_version"] for g in fleet.gateways} == {version}
    # serving.hotswap: drain and undrain through the next gateway, for the whole fleet.
    config = HotSwapConfig(
        gateway_url=dead, more_gateways=(fleet.urls[2],), admin_token=ADMIN_TOKEN
    )
    replica = fleet.replicas[0]

    async def swap_steps() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            publisher = _Publisher(config, client)
            await publisher.drain(replica)
            drained = [
                {r["replica"]: r["drained"] for r in g.fleet()["replicas"]}[replica]
                for g in fleet.gateways
            ]
            assert drained == [True] * len(fleet.gateways)
            await publisher.undrain(replica, "w-swapped")

    asyncio.run(swap_steps())
    controls = [{r["replica"]: r for r in g.fleet()["replicas"]} for g in fleet.gateways]
    assert {(c[replica]["drained"], c[replica]["weights_version"]) for c in controls} == {
        (False, "w-swapped")
    }
