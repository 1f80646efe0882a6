"""``GET /admin/fleet``: the fleet as this gateway sees it (a route of the admin router).

The levers themselves (reload, canary, replica drain and undrain) are the admin API's and the
console's (:mod:`gateway.admin.api`, :mod:`gateway.admin.operations`); with a fleet, each of
them reaches every gateway process from whichever one is asked.
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.admin.dependencies import AdminState
from gateway.admin.models import FleetReplica, FleetStatus
from gateway.fleet.snapshot import split_replica_key


async def fleet_status(state: AdminState) -> FleetStatus:
    """This gateway's fleet: its members, the revision of the state they share and apply, the
    live and canary policies, the replicas' controls, the transport's counters."""
    members = await state.reloader.fleet.live_members()
    applied = state.reloader.applied
    replicas: list[FleetReplica] = []
    for key, control in sorted(applied.replicas.items()):
        target, url = split_replica_key(key)
        replicas.append(
            FleetReplica(
                target=target,
                replica=url,
                drained=control.drained,
                weights_version=control.weights_version,
            )
        )
    canary = state.decider.canary
    return FleetStatus(
        backend=state.config.fleet.backend,
        member=state.reloader.fleet.member_id,
        members=members,
        revision=applied.revision,
        epoch=applied.epoch,
        routing_version=applied.routing_version,
        policy_version=state.routing.policy.version,
        canary=canary.policy.version if canary is not None else None,
        replicas=replicas,
        stats=state.reloader.fleet.stats(),
    )


def add_routes(router: APIRouter) -> None:
    router.add_api_route("/fleet", fleet_status, methods=["GET"])
