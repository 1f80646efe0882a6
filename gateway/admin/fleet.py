"""``GET /admin/fleet``: the fleet as this gateway sees it (admin credential required).

The levers themselves (reload, canary, replica drain and undrain) are the admin API's and the
console's (:mod:`gateway.admin.api`, :mod:`gateway.admin.operations`); with a fleet, each of
them reaches every gateway process from whichever one is asked.
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.access import check_admin
from gateway.errors import GatewayError, json_error_response
from gateway.fleet.snapshot import split_replica_key


async def fleet_status(request: Request) -> Response:
    try:
        state = check_admin(request)
        members = await state.reloader.fleet.live_members()
    except GatewayError as exc:
        return json_error_response(exc)
    applied = state.reloader.applied
    replicas: list[dict[str, Any]] = []
    for key, control in sorted(applied.replicas.items()):
        target, url = split_replica_key(key)
        replicas.append(
            {
                "target": target,
                "replica": url,
                "drained": control.drained,
                "weights_version": control.weights_version,
            }
        )
    body = {
        "backend": state.config.fleet.backend,
        "member": state.reloader.fleet.member_id,
        "members": members,
        "revision": applied.revision,
        "epoch": applied.epoch,
        "routing_version": applied.routing_version,
        "policy_version": state.routing.policy.version,
        "canary": state.decider.canary.policy.version if state.decider.canary is not None else None,
        "replicas": replicas,
        "stats": state.reloader.fleet.stats(),
    }
    return Response(orjson.dumps(body), media_type="application/json")


def routes() -> list[Route]:
    return [Route("/admin/fleet", fleet_status, methods=["GET"])]
