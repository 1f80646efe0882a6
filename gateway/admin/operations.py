"""The ops levers, one implementation each, called by the JSON admin API and by the console.

Each takes the request (for the gateway's state and recorder), the ``actor`` who asked (the
console's operator, or :data:`~gateway.admin.changes.API_ACTOR`) and the operation's inputs;
each records its change in the change log (:mod:`gateway.admin.changes`) after applying it.
Errors are :class:`~gateway.errors.GatewayError` (404 unknown replica, key or canary; 400 a
canary that cannot be built), mapped to HTTP by each caller.

- canary (a release of routing, or of weights and routing): :func:`candidate_policy` (what a
  routing change would be), :func:`start_canary`, :func:`restage` (next stage, pause, resume),
  :func:`promote`, :func:`drop` (roll back);
- keys: :func:`create` (the plaintext is returned once), :func:`revoke`; their consent:
  :mod:`gateway.admin.consent`;
- replicas: :func:`drain`, :func:`undrain` (what a weight hot-swap does to each replica).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from gateway.admin import changes
from gateway.auth.consent import TEAM_ID_PATTERN
from gateway.auth.keys import KeyService
from gateway.backends.replica_pool import ReplicaPool
from gateway.errors import InvalidRequestError, NotFoundError
from gateway.recording.handle import RecorderHandle
from gateway.routing.release import LIVE, release_config
from gateway.routing.release_monitor import ReleaseEvent, test_detail
from gateway.routing.table import Canary, build_policy, read_learned_state
from gateway.state import GatewayState
from router.config import RoutingConfig
from router.errors import PolicyConfigError
from router.learned import LearnedPolicy, LearnedState
from router.policy import RoutingPolicy
from traffic.store import ApiKeyRecord, TrainingUse
from traffic.store.records import ReleaseRecord

log = logging.getLogger(__name__)

MAX_LIMIT: Final = 2**31 - 1  # requests or tokens per minute: far beyond any real limit


class KeyCreate(BaseModel):
    """A new API key's name and limits (``POST /admin/keys``, the console's key form)."""

    model_config = ConfigDict(extra="forbid")

    # A label for people: printable, one line (a NUL cannot even be stored on PostgreSQL).
    name: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    # Bounded to what every store's integer column holds (PostgreSQL's bigint refused 2**63).
    rpm_limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    tpm_limit: int | None = Field(default=None, ge=1, le=MAX_LIMIT)
    budget_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    team_id: str | None = Field(default=None, pattern=TEAM_ID_PATTERN)
    # None: the team's setting, else the config's auth.training_use (gateway.auth.consent).
    training_use: TrainingUse | None = None


def recorder(request: Request) -> RecorderHandle:
    """The gateway's traffic store (404 when ``store.enabled`` is false)."""
    handle: RecorderHandle | None = request.app.state.recorder
    if handle is None:
        raise NotFoundError("the traffic store is off (store.enabled: false)")
    return handle


async def candidate_policy(
    state: GatewayState, routing: RoutingConfig, learned_state: LearnedState | None = None
) -> RoutingPolicy:
    """The policy ``routing`` builds against the gateway's targets, with ``learned_state`` (a
    candidate's own fitted state, given inline), else the live learned state or, when it names
    its own state file, that file's (400 when it cannot be built: unknown targets, an
    unreadable state file)."""
    learned = learned_state or state.decider.learned_state
    live = state.config.routing.learned
    candidate = routing.learned
    try:
        own_file = candidate is not None and candidate.state_file != (live and live.state_file)
        if learned_state is None and candidate is not None and own_file:
            # a candidate scorer (its own state file) on a share of live traffic
            learned = await asyncio.to_thread(read_learned_state, candidate)
        return build_policy(state.config, routing, learned)
    except (ValueError, KeyError, OSError, PolicyConfigError) as exc:
        raise InvalidRequestError(f"invalid routing: {exc}") from exc


async def start_canary(
    request: Request,
    actor: str,
    routing: RoutingConfig,
    share: float,
    weights: str | None = None,
    schedule: tuple[float, ...] = (),
    learned_state: LearnedState | None = None,
    shadow: float = 0.0,
) -> Canary:
    """``routing`` decides ``share`` of the requests from now on (see :func:`candidate_policy`);
    ``weights``: the candidate weights version its arm's local answers come from (a release of
    weights and routing together; a replica must already serve it); ``schedule``: the shares
    of the later stages, each taken when the test finds the candidate not worse (1: promote);
    ``learned_state``: the candidate's own fitted state (the scorer fitted for its weights);
    ``shadow``: a shadow stage first (status ``shadow``, paused): the candidate's weights
    answer that share of all requests off the users' path until a resume, which may carry
    the scorer refitted on those answers."""
    state: GatewayState = request.app.state.switchyard
    if weights is not None and not _replicas_of(state, weights):
        raise InvalidRequestError(f"invalid release: no replica serves weights {weights}")
    if shadow > 0 and (weights is None or state.config.shadow.target is None):
        raise InvalidRequestError(
            "invalid release: a shadow stage needs weights_version and a shadow.target "
            "(the local target the candidate's weights answer on)"
        )
    if any(b <= a for a, b in zip((share, *schedule), schedule, strict=False)):
        raise InvalidRequestError("invalid release: the schedule's shares must increase")
    policy = await candidate_policy(state, routing, learned_state)
    own = policy.state if isinstance(policy, LearnedPolicy) else None  # its own state?
    own = own if own is not state.decider.learned_state else None
    canary = await state.reloader.start_canary(  # every gateway's
        routing, share, own, weights=weights, schedule=schedule, shadow=shadow
    )
    detail = {
        "share": share,
        "current": state.routing.policy.version,
        "weights": weights,
        **({"shadow": shadow} if shadow > 0 else {}),
    }
    handle = request.app.state.recorder
    await changes.record(
        handle,
        actor,
        "routing.canary",
        policy.version,
        detail,
        policy=(routing.model_dump(mode="json"), "canary"),
    )
    live_weights = sorted({v for v in _weights(state).values() if v is not None and v != weights})
    started = ReleaseRecord(
        id=policy.version,
        live_version=state.routing.policy.version,
        live_weights=",".join(live_weights) or None,
        candidate_weights=weights,
        routing=routing.model_dump(mode="json"),
        share=share,
        schedule=[share, *schedule],
        status="shadow" if shadow > 0 else "running",
    )
    await changes.start_release(handle, started)
    return canary


def _weights(state: GatewayState) -> dict[tuple[str, str], str | None]:
    """Every local replica's weights version, by (target, url)."""
    return {
        (target, url): r.weights_version
        for target, pool in state.targets.pools().items()
        for url, r in pool.replicas.items()
    }


def _replicas_of(state: GatewayState, weights: str) -> list[tuple[str, str]]:
    return [key for key, version in _weights(state).items() if version == weights]


async def _fence(state: GatewayState, canary: Canary, promoted: bool) -> list[str]:
    """At the end of a release that carried weights, take the losing weights' replicas out of
    rotation (the candidate's on a rollback, the others on a promotion) until a hot swap puts
    the winning weights on them (its undrain brings them back), so that no request reaches
    weights the test rejected or replaced; a side left without any replica is not fenced."""
    if canary.weights is None:
        return []
    losing = [
        key for key, version in _weights(state).items() if (version == canary.weights) != promoted
    ]
    if len(losing) == len(_weights(state)):
        return []
    for target, url in losing:
        await state.reloader.drain(target, url, 0.0)  # no wait: in-flight requests finish
    return [url for _, url in losing]


async def promote(request: Request, actor: str) -> str:
    """The canary decides every request from now on; returns its version (404: no canary)."""
    state: GatewayState = request.app.state.switchyard
    return await promote_canary(state, request.app.state.recorder, actor)


async def promote_canary(
    state: GatewayState,
    handle: RecorderHandle | None,
    actor: str,
    why: dict[str, object] | None = None,
) -> str:
    """:func:`promote` for any caller (the release monitor passes ``why``, its test's figures)."""
    canary = state.decider.canary
    if canary is None:
        raise NotFoundError("no canary to promote")
    previous = state.routing.policy.version
    # A candidate scorer (its own state file) goes live with the state it was tried with.
    policy = canary.policy
    learned = policy.state if isinstance(policy, LearnedPolicy) else state.decider.learned_state
    file_routing = state.reloader.file_routing()
    await state.reloader.promote(canary.routing, learned)  # every gateway, with its canary
    version = state.routing.policy.version
    fenced = await _fence(state, canary, promoted=True)
    detail: dict[str, object] = {
        "previous": previous,
        "share_before": canary.share,
        "weights": canary.weights,
        "fenced": fenced,
        **(why or {}),
    }
    await changes.record(
        handle,
        actor,
        "routing.promote",
        version,
        detail,
        # The live release: what a restart or reload serves (gateway.routing.release).
        policy=(release_config(canary.routing.model_dump(mode="json"), file_routing), LIVE),
    )
    if previous != version:
        old = {"replaced_by": version}
        await changes.record(handle, actor, "routing.retire", previous, old, policy=None)
    await _end_release(state, handle, canary, "promoted", actor, why)
    return version


async def drop(request: Request, actor: str, why: dict[str, object] | None = None) -> str | None:
    """Roll the canary back (the live policy decides all); returns its version, if any."""
    state: GatewayState = request.app.state.switchyard
    return await drop_canary(state, request.app.state.recorder, actor, why)


async def drop_canary(
    state: GatewayState,
    handle: RecorderHandle | None,
    actor: str,
    why: dict[str, object] | None = None,
) -> str | None:
    """:func:`drop` for any caller (the release monitor passes ``why``)."""
    canary = state.decider.canary
    if canary is None:
        return None
    await state.reloader.drop_canary()  # every gateway's
    fenced = await _fence(state, canary, promoted=False)
    detail = {
        "current": state.routing.policy.version,
        "share": canary.share,
        "weights": canary.weights,
        "fenced": fenced,
        **(why or {}),
    }
    await changes.record(
        handle,
        actor,
        "routing.rollback",
        canary.policy.version,
        detail,
        policy=(canary.routing.model_dump(mode="json"), "rolled_back"),
    )
    await _end_release(state, handle, canary, "rolled_back", actor, why)
    return canary.policy.version


async def _end_release(
    state: GatewayState,
    handle: RecorderHandle | None,
    canary: Canary,
    status: str,
    actor: str,
    why: dict[str, object] | None,
) -> None:
    """The release table's end of ``canary``: who, and the test's figures (the monitor's
    ``why``, else the running test's, so that a decision by hand keeps them too)."""
    if why is None:
        monitor = state.release_monitor
        test = monitor.test(canary.routing.version) if monitor is not None else None
        why = test_detail(test) if test is not None else {}
    decision = {"action": "promote" if status == "promoted" else "rollback", **why}
    await changes.end_release(handle, canary.policy.version, status, actor, decision)


RELEASE_MONITOR = "release-monitor"  # the change log's actor of automatic release decisions


async def act_on_release(
    state: GatewayState, handle: RecorderHandle | None, event: ReleaseEvent
) -> None:
    """The release monitor's decision (gateway.routing.release_monitor), carried out on the
    canary it was made for (a canary replaced meanwhile is left alone): a rollback drops it; a
    pass moves it to its next stage, or promotes it after the last."""
    canary = state.decider.canary
    if canary is None or canary.routing.version != event.release_id:
        return
    why = event.detail()
    try:
        if event.decision == "rollback":
            await drop_canary(state, handle, RELEASE_MONITOR, why)
        elif event.decision == "promote" and canary.schedule and canary.schedule[0] < 1:
            await restage(state, handle, RELEASE_MONITOR, "stage", why)
        elif event.decision == "promote":
            await promote_canary(state, handle, RELEASE_MONITOR, why)
    except Exception:  # the canary stays; the operator sees it and the log says why
        log.exception("release %s: could not %s", event.release_id, event.decision)


StageChange = Literal["stage", "pause", "resume"]


async def restage(
    state: GatewayState,
    handle: RecorderHandle | None,
    actor: str,
    change: StageChange,
    why: dict[str, object] | None = None,
    learned_state: LearnedState | None = None,
) -> Canary:
    """The running release's next ``stage`` (its next share; a new test starts), or ``pause``
    (no request goes to the candidate arm; verdicts awaited still count) or ``resume`` it, on
    every gateway; in the change log and the release table (404: no canary). A resume ends a
    shadow stage; ``learned_state`` then replaces the candidate arm's fitted state (refitted
    on its shadow answers)."""
    canary = state.decider.canary
    if canary is None:
        raise NotFoundError("no canary running")
    share, schedule = canary.share, canary.schedule
    if change == "stage":
        if not schedule or schedule[0] >= 1:
            raise InvalidRequestError("the release has no later stage below 100%: promote it")
        share, schedule = schedule[0], schedule[1:]
    paused = change == "pause"
    if learned_state is not None and (change != "resume" or canary.shadow <= 0):
        raise InvalidRequestError("a new learned state is taken only by a shadow stage's resume")
    if learned_state is not None:  # built here first: a malformed state is the caller's 400
        await candidate_policy(state, canary.routing, learned_state)
    changed = await state.reloader.restage(share, schedule, paused, learned_state)
    if change == "stage" and state.release_monitor is not None:
        state.release_monitor.restart(canary.routing.version)
    detail = {
        "share_before": canary.share,
        "share": share,
        "schedule": list(schedule),
        **({"shadow_ended": True, "refitted": learned_state is not None} if canary.shadow else {}),
        **(why or {}),
    }
    version = canary.policy.version
    await changes.record(handle, actor, f"routing.{change}", version, detail)
    status = "paused" if paused else "running"
    await changes.update_release(handle, version, status=status, share=share)
    return changed


def key_service(request: Request) -> KeyService:
    """The store's keys (404 when the store is off)."""
    state: GatewayState = request.app.state.switchyard
    return KeyService(recorder(request).backend, key_prefix=state.config.auth.key_prefix)


async def create(request: Request, actor: str, spec: KeyCreate) -> tuple[ApiKeyRecord, str]:
    """A new key and its plaintext, which is shown once and kept nowhere."""
    record, plaintext = await key_service(request).create(
        spec.name,
        spec.rpm_limit,
        spec.tpm_limit,
        spec.budget_usd,
        team_id=spec.team_id,
        training_use=spec.training_use,
    )
    detail = {
        "name": spec.name,
        "prefix": record.prefix,
        "budget_usd": spec.budget_usd,
        "team_id": spec.team_id,
        "training_use": spec.training_use,
    }
    await changes.record(request.app.state.recorder, actor, "key.create", record.id, detail)
    return record, plaintext


async def revoke(request: Request, actor: str, key_id: str) -> None:
    """Revoke a key; it is refused at once by this process (404 when not active)."""
    state: GatewayState = request.app.state.switchyard
    if not await key_service(request).revoke(key_id):
        raise NotFoundError(f"no active key {key_id}")
    authenticator = state.admission.authenticator
    if authenticator is not None:
        authenticator.invalidate(key_id)
    await changes.record(request.app.state.recorder, actor, "key.revoke", key_id, {})


def replica_pool(state: GatewayState, target: str, replica: str) -> tuple[ReplicaPool, str]:
    """The pool of local ``target`` and the replica's URL as it keys it (404 when unknown)."""
    pool = state.targets.pools().get(target)
    url = replica.rstrip("/")
    if pool is None or url not in pool.replicas:
        raise NotFoundError(f"no replica {replica} in local target {target}")
    return pool, url


async def drain(
    request: Request, actor: str, target: str, replica: str, timeout_s: float
) -> tuple[str, int]:
    """Take a replica out of rotation and wait for its in-flight requests (weight swaps);
    returns its URL and the requests still in flight (0: drained)."""
    state: GatewayState = request.app.state.switchyard
    _, url = replica_pool(state, target, replica)
    left = await state.reloader.drain(target, url, timeout_s)  # across the fleet
    detail = {"target": target, "in_flight": left}
    await changes.record(request.app.state.recorder, actor, "replica.drain", url, detail)
    return url, left


async def undrain(
    request: Request, actor: str, target: str, replica: str, weights_version: str | None
) -> tuple[str, str | None]:
    """Put a replica back into rotation, optionally with the weights version it now serves;
    returns its URL and weights version."""
    state: GatewayState = request.app.state.switchyard
    pool, url = replica_pool(state, target, replica)
    control = await state.reloader.undrain(target, url, weights_version)  # every gateway
    version = control.weights_version or pool.replicas[url].weights_version
    detail = {"target": target, "weights_version": version}
    await changes.record(request.app.state.recorder, actor, "replica.undrain", url, detail)
    return url, version
