"""Admin API (guarded by the admin credential) and the app-wide error handlers.

The admin credential is read from the env var named by ``gateway.admin_token_env``; when that
variable is unset the admin API refuses every call (use SIGHUP to reload then).

Wrong credentials are throttled per client address (:mod:`gateway.auth.login_throttle`):
:func:`throttled` puts every ``/admin/*`` route behind :func:`check_admin_token`, so the sixth
wrong token within a minute from one address, and any attempt after it (right token or wrong),
gets 429 ``admin_login_throttled`` with ``Retry-After`` in the gateway's JSON error shape before
the token is compared. The console's login and bearer header go through the same function.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.access import bearer_token, check_admin, check_admin_token
from gateway.admin import changes
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.operations import (
    KeyCreate,
    create,
    drain,
    drop,
    key_service,
    promote,
    recorder,
    revoke,
    start_canary,
    undrain,
)
from gateway.auth.keys import public_view
from gateway.config import ConfigFileError
from gateway.doors.skeleton import read_body
from gateway.errors import (
    MAPPED_ERRORS,
    GatewayError,
    InvalidRequestError,
    error_body,
    json_error_response,
)
from gateway.state import GatewayState
from router.config import RoutingConfig
from traffic.export import TRAFFIC_QUERY, ExportConfig, export_from_store, summarize
from traffic.store import InferenceFilter

ADMIN_BODY_LIMIT = 1024 * 1024


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


async def _read_json(request: Request, *, empty_ok: bool = False) -> Any:
    """An admin body: at most ``ADMIN_BODY_LIMIT`` bytes of JSON (413/400 otherwise)."""
    raw = await read_body(request, ADMIN_BODY_LIMIT)
    if not raw and empty_ok:
        return {}
    return orjson.loads(raw)


Endpoint = Callable[[Request], Awaitable[Response]]


def _throttled_endpoint(endpoint: Endpoint) -> Endpoint:
    async def guarded(request: Request) -> Response:
        state: GatewayState = request.app.state.switchyard
        try:
            await check_admin_token(request, state, "admin_api", bearer_token(request))
        except GatewayError as exc:
            return json_error_response(exc)
        return await endpoint(request)  # which checks the credential itself (check_admin)

    return guarded


def throttled(routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """``routes`` (admin routes guarded by :func:`check_admin`) behind the wrong-token
    throttle: a throttled address gets 429 before the handler runs, a wrong token is counted."""
    out: list[BaseRoute] = []
    for route in routes:
        if not isinstance(route, Route):
            raise TypeError(f"only plain routes can be throttled, not {route!r}")
        wrapped = _throttled_endpoint(route.endpoint)
        out.append(Route(route.path, wrapped, methods=route.methods, name=route.name))
    return out


async def reload_config(request: Request) -> Response:
    try:
        state = check_admin(request)
        routing = await state.reloader.reload()
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    except ConfigFileError as exc:
        return _json(error_body(str(exc), "invalid_request_error", None, "invalid_config"), 400)
    return _json(
        {
            "reloaded": True,
            "policy_version": routing.policy.version,
            "reloads": state.decider.reloads,
        }
    )


async def routing_info(request: Request) -> Response:
    try:
        state = check_admin(request)
    except GatewayError as exc:
        return json_error_response(exc)
    return _json(state.routing.config.routing.model_dump())


async def backends_info(request: Request) -> Response:
    try:
        state = check_admin(request)
    except GatewayError as exc:
        return json_error_response(exc)
    pools = state.targets.pools()
    out = {}
    for name, bc in state.config.backends.items():
        entry: dict[str, Any] = {
            "kind": bc.kind,
            "model": bc.model,
            "breaker": state.breakers[name].state.name.lower(),
        }
        if name in pools:
            entry["replicas"] = [
                {
                    "url": r.url,
                    "healthy": r.healthy,
                    "in_flight": r.in_flight,
                    "weights_version": r.weights_version,
                }
                for r in pools[name].replicas.values()
            ]
        out[name] = entry
    return _json(out)


class ReplicaCommand(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: str
    replica: str
    timeout_s: float = Field(default=60.0, gt=0)
    weights_version: str | None = None


async def _replica_command(request: Request) -> ReplicaCommand:
    check_admin(request)
    try:
        return ReplicaCommand.model_validate(await _read_json(request))
    except (orjson.JSONDecodeError, ValidationError) as exc:
        raise InvalidRequestError(f"invalid replica command: {exc}") from exc


async def drain_replica(request: Request) -> Response:
    """``POST /admin/replicas/drain``: see :func:`drain`."""
    try:
        cmd = await _replica_command(request)
        url, left = await drain(request, changes.API_ACTOR, cmd.target, cmd.replica, cmd.timeout_s)
    except GatewayError as exc:
        return json_error_response(exc)
    return _json({"replica": url, "drained": left == 0, "in_flight": left})


async def undrain_replica(request: Request) -> Response:
    """``POST /admin/replicas/undrain``: see :func:`undrain`."""
    try:
        cmd = await _replica_command(request)
        url, version = await undrain(
            request, changes.API_ACTOR, cmd.target, cmd.replica, cmd.weights_version
        )
    except GatewayError as exc:
        return json_error_response(exc)
    return _json({"replica": url, "drained": False, "weights_version": version})


class ExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: InferenceFilter = Field(default_factory=InferenceFilter)
    export: ExportConfig


async def traffic_summary(request: Request) -> Response:
    """``GET /admin/traffic/summary?by=route_target,day&since=...&route_target=...&tag=k=v``."""
    try:
        check_admin(request)
        handle = recorder(request)
        params = request.query_params
        by = [b for b in params.get("by", "").split(",") if b]
        fields: dict[str, Any] = {
            k: v for k, v in params.items() if k not in ("by", "tag") and v != ""
        }
        tags = params.getlist("tag")
        malformed = [t for t in tags if "=" not in t]
        if malformed:
            raise InvalidRequestError(
                f"invalid traffic query: tag filters are key=value, got {malformed[0][:100]!r}",
                param="tag",
            )
        fields["tags"] = dict(t.split("=", 1) for t in tags)
        query = TRAFFIC_QUERY.validate_python(fields)
        rows = await summarize(handle.backend, query, by)
    except ValidationError as exc:
        return json_error_response(InvalidRequestError(f"invalid traffic query: {exc}"))
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    except ValueError as exc:
        return json_error_response(InvalidRequestError(str(exc)))
    return _json({"object": "list", "data": rows})


async def traffic_export(request: Request) -> Response:
    """``POST /admin/traffic/export`` with ``{"query": {...}, "export": ExportConfig}``."""
    try:
        check_admin(request)
        handle = recorder(request)
        req = ExportRequest.model_validate(await _read_json(request))
        manifest = await export_from_store(
            handle.backend, req.query, req.export, legacy=LIVE_TRANSLATOR
        )
    except (orjson.JSONDecodeError, ValidationError) as exc:
        return json_error_response(InvalidRequestError(f"invalid export request: {exc}"))
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json(manifest.model_dump(mode="json"))


async def create_key(request: Request) -> Response:
    """``POST /admin/keys``: the plaintext key is in this answer and nowhere else, ever."""
    try:
        check_admin(request)
        spec = KeyCreate.model_validate(await _read_json(request, empty_ok=True))
        record, plaintext = await create(request, changes.API_ACTOR, spec)
    except (orjson.JSONDecodeError, ValidationError) as exc:
        return json_error_response(InvalidRequestError(f"invalid key spec: {exc}"))
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json({**public_view(record), "key": plaintext}, 201)


async def list_keys(request: Request) -> Response:
    try:
        check_admin(request)
        records = await key_service(request).list()
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json({"object": "list", "data": [public_view(r) for r in records]})


async def revoke_key(request: Request) -> Response:
    key_id = request.path_params["key_id"]
    try:
        check_admin(request)
        await revoke(request, changes.API_ACTOR, key_id)
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json({"id": key_id, "revoked": True})


class CanaryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    routing: RoutingConfig
    share: float = Field(ge=0, le=1)


async def set_canary(request: Request) -> Response:
    """``POST /admin/canary``: a candidate routing decides ``share`` of the requests."""
    try:
        state = check_admin(request)
        req = CanaryRequest.model_validate(await _read_json(request))
        canary = await start_canary(request, changes.API_ACTOR, req.routing, req.share)
    except (ValueError, KeyError) as exc:  # a bad body
        return json_error_response(InvalidRequestError(f"invalid canary: {exc}"))
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json(
        {
            "canary": canary.policy.version,
            "share": canary.share,
            "current": state.routing.policy.version,
        }
    )


async def promote_canary(request: Request) -> Response:
    """``POST /admin/canary/promote``: the candidate decides every request from now on."""
    try:
        check_admin(request)
        version = await promote(request, changes.API_ACTOR)
    except GatewayError as exc:
        return json_error_response(exc)
    return _json({"promoted": version})


async def drop_canary(request: Request) -> Response:
    """``DELETE /admin/canary``: roll the candidate back; the current policy decides all."""
    try:
        state = check_admin(request)
        dropped = await drop(request, changes.API_ACTOR)
    except GatewayError as exc:
        return json_error_response(exc)
    return _json({"dropped": dropped, "current": state.routing.policy.version})


def routes() -> list[Route]:
    return [
        Route("/admin/keys", create_key, methods=["POST"]),
        Route("/admin/keys", list_keys, methods=["GET"]),
        Route("/admin/keys/{key_id}/revoke", revoke_key, methods=["POST"]),
        Route("/admin/canary", set_canary, methods=["POST"]),
        Route("/admin/canary", drop_canary, methods=["DELETE"]),
        Route("/admin/canary/promote", promote_canary, methods=["POST"]),
        Route("/admin/traffic/summary", traffic_summary, methods=["GET"]),
        Route("/admin/traffic/export", traffic_export, methods=["POST"]),
        Route("/admin/replicas/drain", drain_replica, methods=["POST"]),
        Route("/admin/replicas/undrain", undrain_replica, methods=["POST"]),
        Route("/admin/reload", reload_config, methods=["POST"]),
        Route("/admin/routing", routing_info, methods=["GET"]),
        Route("/admin/backends", backends_info, methods=["GET"]),
    ]


def install_error_handlers(app: Starlette) -> None:
    """Unknown paths and methods answer in OpenAI's error shape too, and so does the last resort:
    an exception no handler answered is a 500 in that shape (Starlette logs it and the server
    then closes the connection), never a plain-text page."""

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _json(error_body(msg, kind, None, None), exc.status_code)

    async def unhandled(request: Request, exc: Exception) -> Response:
        return json_error_response(exc)

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unhandled)
