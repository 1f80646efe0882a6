"""The admin router: every ``/admin`` route typed, behind the admin token, with its OpenAPI.

- :func:`admin_router` gathers the routes of :mod:`gateway.admin.api`, :mod:`~gateway.admin.
  episodes` and :mod:`~gateway.admin.fleet` under ``/admin``, with
  :func:`gateway.access.require_admin` a dependency of every one: the wrong-token throttle,
  then the credential (429 with ``Retry-After``, 403 admin off, 401), in the gateway's error
  shape;
- :class:`AdminRoute` checks the token before a route's body is read, and reads at most
  ``ADMIN_BODY_LIMIT`` bytes of it (413 past that): FastAPI reads and parses a body before it
  resolves any dependency, which would read a body whole for a client without the token and
  answer a malformed one 400 before the token was checked;
- ``GET /admin/openapi.json`` (OpenAPI 3.1 of the admin routes alone, built on the first ask)
  and ``GET /admin/docs`` (Swagger UI) sit behind the same dependency.

A request that fails validation answers 400 in the gateway's error shape, never FastAPI's 422
(:func:`gateway.admin.api.install_error_handlers`); the schema says so: each route's ``4XX``
answer is :class:`~gateway.admin.models.ErrorBody`. The inference doors, ``/health``,
``/ready``, ``/metrics`` and the console are plain Starlette routes of the same app, outside
this router: no dependency or validation on their path, and not in this schema.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

import orjson
from fastapi import APIRouter, Depends
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute
from starlette.types import Message, Receive

from gateway.access import require_admin
from gateway.admin import api, episodes, fleet, forget_api
from gateway.admin.models import ErrorBody
from gateway.doors.skeleton import read_body

# A routing config or an export request is a few kilobytes: 1 MiB leaves room, and bounds what
# one admin request makes the gateway hold.
ADMIN_BODY_LIMIT: Final = 1024 * 1024
OPENAPI_PATH: Final = "/admin/openapi.json"
TITLE: Final = "Switchyard admin API"

_REFUSALS: Final[dict[int | str, dict[str, Any]]] = {
    "4XX": {
        "model": ErrorBody,
        "description": "Refused, in the gateway's error shape: 400 a malformed body or query, "
        "401 a wrong or missing admin token, 403 admin off, 404, "
        f"413 a body over {ADMIN_BODY_LIMIT // 1024} KiB, "
        "429 too many wrong tokens from this address (Retry-After).",
    }
}


class AdminRoute(APIRoute):
    """An admin route whose body is read only after the admin check, at most
    ``ADMIN_BODY_LIMIT`` bytes of it. A route without a body is FastAPI's own: the router's
    dependency runs before anything of the request is read."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked_first(request: Request) -> Response:
            await require_admin(request)  # FastAPI's call of it, later, finds it passed
            body = await read_body(request, ADMIN_BODY_LIMIT)
            return await handler(Request(request.scope, _replay(body, request.receive)))

        return checked_first


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` with the body, already read, given back first."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


def admin_openapi(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``routes`` (those in the schema), the admin token declared
    as the bearer credential every operation needs."""
    try:
        release = version("switchyard")
    except PackageNotFoundError:  # run from a checkout that was never installed
        release = "unknown"
    schema = get_openapi(
        title=TITLE,
        version=release,
        openapi_version="3.1.0",
        description="The gateway's ops levers and reports. Every route needs the admin token "
        "(the environment variable `gateway.admin_token_env` names) as a bearer credential.",
        routes=routes,
    )
    schema.setdefault("components", {})["securitySchemes"] = {
        "adminToken": {"type": "http", "scheme": "bearer"}
    }
    schema["security"] = [{"adminToken": []}]
    return schema


def admin_router() -> APIRouter:
    """Every admin route under ``/admin``, behind :func:`~gateway.access.require_admin`, with
    the schema and its Swagger page."""
    router = APIRouter(
        prefix="/admin",
        dependencies=[Depends(require_admin)],
        route_class=AdminRoute,
        responses=_REFUSALS,  # also keeps FastAPI's 422 out of the schema: it is never answered
        strict_content_type=False,  # a JSON body without a Content-Type is read, as it was
    )
    api.add_routes(router)
    episodes.add_routes(router)
    forget_api.add_routes(router)
    fleet.add_routes(router)
    built: list[bytes] = []  # the schema, once asked for: building it takes tens of ms

    async def openapi_json() -> Response:
        if not built:
            built.append(orjson.dumps(admin_openapi(router.routes)))
        return Response(built[0], media_type="application/json")

    async def docs() -> HTMLResponse:
        # FastAPI's Swagger UI page: the browser loads swagger-ui's script and stylesheet, and
        # FastAPI's icon, from a public CDN (FastAPI's defaults; without internet access the
        # page stays blank, the schema itself needs none), then fetches /admin/openapi.json.
        # A browser sends no admin token on its own: it must add the Authorization header to
        # both requests (a header-setting extension, an authenticating proxy); the page's
        # Authorize button then sends it with "Try it out".
        return get_swagger_ui_html(openapi_url=OPENAPI_PATH, title=TITLE)

    router.add_api_route("/openapi.json", openapi_json, methods=["GET"], include_in_schema=False)
    router.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
    return router
