"""What an admin route declares it needs (FastAPI dependencies), each resolved once a request.

- :data:`AdminState`: the gateway's state, once the request passed the admin guard
  (:func:`gateway.access.require_admin`: throttle, then credential), which the admin router
  also applies to every route, so a route that names it pays no second check;
- :data:`Store`: the traffic store's handle; 404 while ``store.enabled`` is false, before the
  route's query or body is validated (as the admin API always answered);
- :data:`Actor`: who the change log names for a change (:func:`gateway.admin.changes.api_actor`:
  the ``X-Switchyard-Actor`` an automation sends, else ``admin-api``), documented in the schema.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header
from starlette.requests import Request

from gateway.access import require_admin
from gateway.admin.changes import api_actor
from gateway.admin.operations import recorder
from gateway.recording.handle import RecorderHandle
from gateway.state import GatewayState


async def store_handle(request: Request) -> RecorderHandle:
    """The traffic store's handle (404 while the store is off); async, so FastAPI calls it on
    the loop rather than in a worker thread."""
    return recorder(request)


async def request_actor(
    x_switchyard_actor: Annotated[
        str | None,
        Header(description="An automation's name for the change log (lower case, dashes)."),
    ] = None,
) -> str:
    """The change log's actor of this request (async: resolved on the loop)."""
    return api_actor(x_switchyard_actor)


AdminState = Annotated[GatewayState, Depends(require_admin)]
Store = Annotated[RecorderHandle, Depends(store_handle)]
Actor = Annotated[str, Depends(request_actor)]
