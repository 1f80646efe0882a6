"""The admin API's levers and reports (``/admin/...``), and the app-wide error handlers.

Routes (each typed: request and answer models in :mod:`gateway.admin.models`; the admin router
of :mod:`gateway.admin.router` puts them under ``/admin``, behind the admin token):

- keys: ``POST /keys`` (201; the plaintext once), ``GET /keys``, ``POST /keys/{key_id}/revoke``,
  ``PATCH /keys/{key_id}`` (its team and consent); teams: ``GET /teams``, ``PUT /teams/{id}``;
- canary: ``POST /canary`` (a routing, or weights and routing, release), ``POST
  /canary/pause`` and ``/canary/resume``, ``POST /canary/promote``, ``DELETE /canary`` (roll back);
  ``GET /releases/{id}`` (the release table's row);
- replicas: ``POST /replicas/drain``, ``POST /replicas/undrain`` (a weight swap's steps);
- config: ``POST /reload`` (the config file again), ``GET /routing``, ``GET /backends``;
- traffic: ``GET /traffic/summary``, ``POST /traffic/export``; forgetting: ``POST /forget``
  (:mod:`gateway.admin.forget_api`).

Each lever is :mod:`gateway.admin.operations`' (which the console calls too). A handler raises
the gateway's errors (:mod:`gateway.errors`); :func:`install_error_handlers` answers them, and
a request that fails validation, in the gateway's JSON error shape (400, not FastAPI's 422).
"""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from fastapi.exceptions import RequestValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import Response

from gateway.admin import changes
from gateway.admin.consent import (
    KeyConsent,
    TeamConsent,
    consent_service,
    set_key_consent,
    set_team_consent,
)
from gateway.admin.dependencies import Actor, AdminState, Store
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.models import (
    BackendState,
    CanaryDropped,
    CanaryPromoted,
    CanaryRequest,
    CanaryResume,
    CanaryStaged,
    CanaryStarted,
    CreatedKey,
    ExportRequest,
    KeyList,
    KeyView,
    ReleaseView,
    Reloaded,
    ReplicaCommand,
    ReplicaDrained,
    ReplicaState,
    ReplicaUndrained,
    RevokedKey,
    TeamList,
    TeamView,
    TrafficExportManifest,
    TrafficSummary,
    TrafficSummaryQuery,
)
from gateway.admin.operations import (
    KeyCreate,
    create,
    drain,
    drop,
    key_service,
    promote,
    restage,
    revoke,
    start_canary,
    undrain,
)
from gateway.auth.keys import public_view
from gateway.config import ConfigFileError
from gateway.errors import (
    MAPPED_ERRORS,
    InvalidRequestError,
    NotFoundError,
    error_body,
    invalid_request,
    json_error_response,
)
from gateway.routing.table import Canary
from router.config import RoutingConfig
from router.learned import LearnedState
from traffic.export import export_from_store, summarize
from traffic.store import TeamRecord
from traffic.store.console_queries import release


async def create_key(request: Request, actor: Actor, spec: KeyCreate) -> CreatedKey:
    """A new API key with its limits; the plaintext key is in this answer and nowhere else."""
    record, plaintext = await create(request, actor, spec)
    return CreatedKey(**public_view(record), key=plaintext)


async def list_keys(request: Request) -> KeyList:
    """Every key, active and revoked."""
    records = await key_service(request).list()
    return KeyList(data=[KeyView(**public_view(r)) for r in records])


async def revoke_key(request: Request, actor: Actor, key_id: str) -> RevokedKey:
    """Revoke a key: refused at once by this process (404 when not active)."""
    await revoke(request, actor, key_id)
    return RevokedKey(id=key_id, revoked=True)


async def update_key(request: Request, actor: Actor, key_id: str, body: KeyConsent) -> KeyView:
    """Change a key's team and/or its own consent (only the fields given; null clears one)."""
    return KeyView(**public_view(await set_key_consent(request, actor, key_id, body)))


def _team_view(team: TeamRecord) -> TeamView:
    return TeamView(
        id=team.id, created_at=team.created_at.isoformat(), training_use=team.training_use
    )


async def list_teams(request: Request) -> TeamList:
    """Every team with a setting, and the consent its keys inherit."""
    return TeamList(data=[_team_view(t) for t in await consent_service(request).teams()])


async def set_team(request: Request, actor: Actor, team_id: str, body: TeamConsent) -> TeamView:
    """Set a team's consent (the team is created if new); its keys without one take it."""
    return _team_view(await set_team_consent(request, actor, team_id, body.training_use))


async def set_canary(
    request: Request, state: AdminState, actor: Actor, body: CanaryRequest
) -> CanaryStarted:
    """A candidate routing decides ``share`` of the requests, on every gateway of the fleet."""
    try:
        own = LearnedState.from_json(body.learned_state) if body.learned_state else None
        canary = await start_canary(
            request,
            actor,
            body.routing,
            body.share,
            body.weights_version,
            tuple(body.schedule),
            own,
            body.shadow,
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a malformed state too
        raise InvalidRequestError(f"invalid canary: {exc}") from exc
    current = state.routing.policy.version
    return CanaryStarted(canary=canary.policy.version, share=canary.share, current=current)


async def pause_canary(request: Request, state: AdminState, actor: Actor) -> CanaryStaged:
    """No request goes to the canary's arm until resumed (404: no canary)."""
    return _staged(await restage(state, request.app.state.recorder, actor, "pause"))


NO_RESUME_BODY = CanaryResume()  # a resume without a body (the console's button)


async def resume_canary(
    request: Request, state: AdminState, actor: Actor, body: CanaryResume = NO_RESUME_BODY
) -> CanaryStaged:
    """The paused canary takes its share again, a shadow stage ends (with the candidate arm's
    state refitted on its shadow answers, when given) (404: no canary)."""
    try:
        own = LearnedState.from_json(body.learned_state) if body.learned_state else None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # a malformed state
        raise InvalidRequestError(f"invalid learned state: {exc}") from exc
    return _staged(await restage(state, request.app.state.recorder, actor, "resume", None, own))


def _staged(canary: Canary) -> CanaryStaged:
    return CanaryStaged(
        canary=canary.policy.version,
        share=canary.share,
        paused=canary.paused,
        schedule=list(canary.schedule),
    )


async def promote_canary(request: Request, actor: Actor) -> CanaryPromoted:
    """The canary decides every request from now on (404: no canary)."""
    return CanaryPromoted(promoted=await promote(request, actor))


async def drop_canary(
    request: Request,
    state: AdminState,
    actor: Actor,
    reason: Annotated[str | None, Query(max_length=500)] = None,
) -> CanaryDropped:
    """Roll the canary back: the live policy decides all (``reason``: why, for the change log
    and the release table)."""
    dropped = await drop(request, actor, {"reason": reason} if reason else None)
    return CanaryDropped(dropped=dropped, current=state.routing.policy.version)


async def traffic_summary(
    handle: Store, query: Annotated[TrafficSummaryQuery, Query()]
) -> TrafficSummary:
    """Count, errors, cost, latency and TTFT percentiles, acceptance per group of the traffic
    the filter selects."""
    try:
        rows = await summarize(handle.backend, query.traffic_filter(), query.group_by())
    except MAPPED_ERRORS:
        raise
    except ValueError as exc:  # an unknown or repeated group-by column
        raise InvalidRequestError(str(exc)) from exc
    return TrafficSummary(data=rows)


async def traffic_export(handle: Store, body: ExportRequest) -> TrafficExportManifest:
    """Export the traffic the filter selects as a dataset (files on the gateway's disk)."""
    manifest = await export_from_store(
        handle.backend, body.query, body.export, legacy=LIVE_TRANSLATOR
    )
    return TrafficExportManifest.model_validate(manifest.model_dump(mode="json"))


async def drain_replica(request: Request, actor: Actor, cmd: ReplicaCommand) -> ReplicaDrained:
    """Take a replica out of rotation and wait up to ``timeout_s`` for its requests."""
    url, left = await drain(request, actor, cmd.target, cmd.replica, cmd.timeout_s)
    return ReplicaDrained(replica=url, drained=left == 0, in_flight=left)


async def undrain_replica(request: Request, actor: Actor, cmd: ReplicaCommand) -> ReplicaUndrained:
    """Put a replica back into rotation, with the weights version it now serves if given."""
    url, version = await undrain(request, actor, cmd.target, cmd.replica, cmd.weights_version)
    return ReplicaUndrained(replica=url, drained=False, weights_version=version)


async def reload_config(request: Request, state: AdminState, actor: Actor) -> Reloaded:
    """Read the config file again and apply its routing (400 ``invalid_config``: kept the old);
    recorded in the change log with the caller's actor (``x-switchyard-actor``)."""
    previous = state.routing.policy.version
    try:
        routing = await state.reloader.reload()
    except ConfigFileError as exc:
        raise InvalidRequestError(str(exc), code="invalid_config") from exc
    version = routing.policy.version
    await changes.record_reload(request.app.state.recorder, actor, previous, version)
    return Reloaded(reloaded=True, policy_version=version, reloads=state.decider.reloads)


async def release_info(handle: Store, release_id: str) -> ReleaseView:
    """One release from the release table (404: none recorded by that id)."""
    found = await release(handle.backend, release_id)
    if found is None:
        raise NotFoundError(f"no release {release_id}")
    return ReleaseView(**{f: getattr(found, f) for f in ReleaseView.model_fields})


async def routing_info(state: AdminState) -> RoutingConfig:
    """The live routing config."""
    return state.routing.config.routing


async def backends_info(state: AdminState) -> dict[str, BackendState]:
    """Each back-end: its kind, model and breaker; a local one's replicas too."""
    pools = state.targets.pools()
    out: dict[str, BackendState] = {}
    for name, bc in state.config.backends.items():
        breaker = state.breakers[name].state.name.lower()
        backend = BackendState(kind=bc.kind, model=bc.model, breaker=breaker)
        if name in pools:
            backend.replicas = [
                ReplicaState(
                    url=r.url,
                    healthy=r.healthy,
                    in_flight=r.in_flight,
                    weights_version=r.weights_version,
                )
                for r in pools[name].replicas.values()
            ]
        out[name] = backend
    return out


def add_routes(router: APIRouter) -> None:
    """The admin API's routes, on the admin router (its prefix, guard and route class)."""
    router.add_api_route("/keys", create_key, methods=["POST"], status_code=201)
    router.add_api_route("/keys", list_keys, methods=["GET"])
    router.add_api_route("/keys/{key_id}/revoke", revoke_key, methods=["POST"])
    router.add_api_route("/keys/{key_id}", update_key, methods=["PATCH"])
    router.add_api_route("/teams", list_teams, methods=["GET"])
    router.add_api_route("/teams/{team_id}", set_team, methods=["PUT"])
    router.add_api_route("/canary", set_canary, methods=["POST"])
    router.add_api_route("/canary", drop_canary, methods=["DELETE"])
    router.add_api_route("/canary/promote", promote_canary, methods=["POST"])
    router.add_api_route("/canary/pause", pause_canary, methods=["POST"])
    router.add_api_route("/canary/resume", resume_canary, methods=["POST"])
    router.add_api_route("/releases/{release_id}", release_info, methods=["GET"])
    router.add_api_route("/traffic/summary", traffic_summary, methods=["GET"])
    router.add_api_route("/traffic/export", traffic_export, methods=["POST"])
    router.add_api_route("/replicas/drain", drain_replica, methods=["POST"])
    router.add_api_route("/replicas/undrain", undrain_replica, methods=["POST"])
    router.add_api_route("/reload", reload_config, methods=["POST"])
    router.add_api_route("/routing", routing_info, methods=["GET"])
    # Only a local back-end has replicas: the others' answers leave the field out, as always.
    router.add_api_route(
        "/backends", backends_info, methods=["GET"], response_model_exclude_unset=True
    )


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


def install_error_handlers(app: Starlette) -> None:
    """Every error in OpenAI's JSON error shape (:mod:`gateway.errors`): the gateway's own
    errors a handler raised (the admin routes raise theirs), a request that failed validation
    (400 naming the field: :func:`~gateway.errors.invalid_request`), unknown paths and methods,
    and the last resort: an exception no handler answered is a 500 in that shape (Starlette
    logs it and the server then closes the connection), never a plain-text page."""

    async def mapped(request: Request, exc: Exception) -> Response:
        return json_error_response(exc)  # the one mapping: 500 for an exception it doesn't map

    async def invalid(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return json_error_response(invalid_request(exc.errors()))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _json(error_body(msg, kind, None, None), exc.status_code)

    for mapped_type in MAPPED_ERRORS:
        app.add_exception_handler(mapped_type, mapped)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, mapped)
