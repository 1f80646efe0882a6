"""Step 5 as a release: a candidate earns its traffic by evidence, weights and routing together.

    swap      the candidate's weights onto ``canary_replicas`` of the replicas only (the
              hot-swap: drain, reload, probe, undrain tagged with the candidate's version)
    routing   the scorer fitted for the candidate's weights (its gate answers, the classes it
              cannot be told apart on inherited), written beside the round, not served yet
    shadow    optional (``release.shadow`` > 0 and the caller's ``ReleaseTraffic.shadow``): the
              release starts in its shadow stage, paused, the candidate's replicas answering
              that share of users' requests off their path; when that traffic is done the
              candidate's routing is refitted with those answers verified (live traffic's
              mix, the candidate's own weights) and the resume hands it to the candidate arm,
              unless its weights are surely worse on some class than the served ones, or than
              its own gate said (``rl_loop.shadow_gate``): then it is rolled back before any
              user sees it.
              A scorer fitted on the gate's few items alone sends little local, so the test
              would see few requests on which the arms differ and time out
    canary    ``POST /admin/canary`` with that routing and state inline, the candidate's weights
              version, ``share`` and the later stages: the gateway's candidate arm routes by the
              candidate's scorer and answers locally only from the candidate's replicas, live
              from the others (gateway.routing.decider); users' verdicts on the requests the
              arms could answer differently feed the sequential test
              (gateway.routing.release_monitor), which moves it through its stages, promotes
              it, or rolls it back (worse than live by the margin, or a segment's local accept
              under the floor) and fences the losing weights' replicas
    traffic   ``drive`` sends users' requests (the caller's: the flywheel's simulated IDE) until
              the release ends or ``drive`` runs out of its budget; then the loop rolls it back
              itself (no evidence is not a pass: fail safe)
    weights   promoted: the other replicas take the candidate (their swap undrains them);
              rolled back: the canary replicas go back to the served weights

Every step is in the gateway's change log (the canary and its end by ``release-monitor`` or
``flywheel``; the swaps by the hot-swap's actor) and in the release table. Afterwards the loop's
refit (step 6) fits routing for whatever is served, as without a release.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson

from rl_loop.config import LoopConfig
from rl_loop.model_registry import TaintedCheckpoint, record_checkpoint, refuse_tainted
from rl_loop.outcomes import verdict_of
from serving.build import read_version
from serving.hotswap import HotSwapConfig, SwapReport, publish_weights
from traffic.store import InferenceFilter, StoreBackend

log = logging.getLogger(__name__)

# Users' traffic until the event is set (or the caller's own budget runs out).
Drive = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass(frozen=True, slots=True)
class Refitted:
    """The candidate's routing fitted again with its shadow answers (the learned state's JSON),
    and the classes its weights are surely worse on than the served ones or than its own gate
    said (``rl_loop.shadow_gate``; any: the release is rolled back before users see it)."""

    state: dict[str, Any]
    regressions: dict[str, Any] = field(default_factory=dict)


# The shadow stage's end: the refit and the regression check, over the records since the time.
Refit = Callable[[datetime], Coroutine[Any, Any, Refitted]]


@dataclass(frozen=True, slots=True)
class ReleaseTraffic:
    """The users' traffic of a release: ``live`` while the arms serve, ``shadow`` (optional)
    for the shadow stage, run to its own budget; it returns once its requests are recorded
    and their labels kept, so that the refit can verify the shadows."""

    live: Drive
    shadow: Drive | None = None


ENDED = frozenset({"promoted", "rolled_back"})
ACTOR = "flywheel"


@dataclass(slots=True)
class ReleaseOutcome:
    """What the release did, for the round's report."""

    release_id: str
    status: str = "not_started"  # promoted | rolled_back | swap_failed | tainted | not_started
    decided_by: str | None = None
    timed_out: bool = False
    decision: dict[str, Any] = field(default_factory=dict)
    shadow: dict[str, Any] = field(default_factory=dict)  # the shadow stage, when there was one
    swaps: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    arms: dict[str, Any] = field(default_factory=dict)  # from the record (release_figures)

    @property
    def promoted(self) -> bool:
        return self.status == "promoted"

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def _swap_json(name: str, report: SwapReport) -> dict[str, Any]:
    return {
        "step": name,
        "ok": report.ok,
        "rolled_back": report.rolled_back,
        "replicas": [r.replica for r in report.replicas],
        "seconds": round(report.seconds, 2),
    }


async def _admin(
    swap: HotSwapConfig, method: str, path: str, body: dict[str, Any] | None = None
) -> Any:
    headers = {"authorization": f"Bearer {swap.admin_token}", "x-switchyard-actor": ACTOR}
    async with httpx.AsyncClient(timeout=swap.request_timeout_s) as client:
        response = await client.request(
            method, swap.gateway_url.rstrip("/") + path, json=body, headers=headers
        )
    if response.status_code != 200:
        raise RuntimeError(f"{method} {path} failed ({response.status_code}): {response.text}")
    return response.json()


async def release_candidate(
    round_index: int,
    candidate_dir: Path,
    served_dir: Path,
    replicas: tuple[str, ...],
    candidate_state: Path,
    store: StoreBackend,
    swap: HotSwapConfig,
    config: LoopConfig,
    drive: ReleaseTraffic,
    refit: Refit | None = None,
) -> ReleaseOutcome:
    """The release of ``candidate_dir`` (module docstring); ``candidate_state``: the learned
    state fitted for its weights; ``refit``: that fit again, for the shadow stage's end.
    Returns what it did; the replicas serve the outcome's winner."""
    cfg = config.release
    started = time.perf_counter()
    version = read_version(candidate_dir).version_id
    canary, rest = replicas[-cfg.canary_replicas :], replicas[: -cfg.canary_replicas]
    if not rest:
        raise ValueError("a release needs more replicas than canary_replicas")
    outcome = ReleaseOutcome(release_id=f"release-r{round_index}-{version}")
    try:  # one that learned from a forgotten record (or descends from one) never ships
        await refuse_tainted(store, candidate_dir)
    except TaintedCheckpoint as exc:
        outcome.status, outcome.decision = "tainted", {"reason": str(exc)}
        return outcome
    await record_checkpoint(store, candidate_dir, "candidate")
    first = await publish_weights(candidate_dir, served_dir, canary, swap)
    outcome.swaps.append(_swap_json("canary", first))
    if not first.ok:
        outcome.status = "swap_failed"
        await record_checkpoint(store, candidate_dir, "rejected")
        return outcome
    live_routing = await _admin(swap, "GET", "/admin/routing")
    state = orjson.loads(await asyncio.to_thread(candidate_state.read_bytes))
    body = {
        "routing": {**live_routing, "version": outcome.release_id},
        "share": cfg.share,
        "schedule": list(cfg.schedule),
        "weights_version": version,
        "learned_state": state,
    }
    shadowing = cfg.shadow > 0 and drive.shadow is not None and refit is not None
    if shadowing:
        body["shadow"] = cfg.shadow
    started_canary = await _admin(swap, "POST", "/admin/canary", body)
    policy_version = str(started_canary["canary"])  # the release table's id
    path = f"/admin/releases/{quote(policy_version, safe='')}"  # the release table's row
    if shadowing:
        assert drive.shadow is not None and refit is not None
        outcome.shadow = await _shadow_stage(drive.shadow, refit, swap, path)
    if (await _admin(swap, "GET", path))["status"] not in ENDED:
        await _live_stage(drive.live, swap, path, cfg.poll_s)
    record = await _admin(swap, "GET", path)
    if record["status"] not in ENDED:
        outcome.timed_out = True  # no decision within the traffic: roll back, fail safe
        await _admin(swap, "DELETE", "/admin/canary")
        record = await _admin(swap, "GET", path)
    outcome.status, outcome.decided_by = record["status"], record["decided_by"]
    outcome.decision = dict(record["decision"])
    if outcome.promoted:
        second = await publish_weights(candidate_dir, served_dir, rest, swap)
        outcome.swaps.append(_swap_json("rest", second))
        if second.ok:
            await record_checkpoint(store, served_dir, "retired")
            await record_checkpoint(store, candidate_dir, "promoted")
        else:  # the rest still serve the old weights: the candidate is not the served model
            outcome.status = "swap_failed"
            back = await publish_weights(served_dir, candidate_dir, canary, swap)
            outcome.swaps.append(_swap_json("canary_back", back))
    else:
        back = await publish_weights(served_dir, candidate_dir, canary, swap)
        outcome.swaps.append(_swap_json("canary_back", back))
        await record_checkpoint(store, candidate_dir, "rejected")
    outcome.seconds = round(time.perf_counter() - started, 1)
    return outcome


async def _live_stage(drive: Drive, swap: HotSwapConfig, path: str, poll_s: float) -> None:
    """Users' traffic on both arms until the release ends or the traffic does."""
    stop = asyncio.Event()
    traffic = asyncio.create_task(drive(stop))
    try:
        while not traffic.done():
            if (await _admin(swap, "GET", path))["status"] in ENDED:
                break
            await asyncio.sleep(poll_s)
    finally:
        stop.set()
        await traffic


async def _shadow_stage(
    drive: Drive, refit: Refit, swap: HotSwapConfig, path: str
) -> dict[str, Any]:
    """The shadow stage (module docstring): its traffic, the refit and the regression check,
    then the resume, or the rollback when the candidate's weights regressed on a class. An
    operator who ended the release meanwhile is obeyed."""
    started, since = time.perf_counter(), datetime.now(UTC)
    await drive(asyncio.Event())
    refitted = await refit(since)
    out: dict[str, Any] = {"routing": refitted.state.get("version")}
    if refitted.regressions:
        out["regressions"] = refitted.regressions
    if (await _admin(swap, "GET", path))["status"] in ENDED:
        out["ended_by_operator"] = True
    elif refitted.regressions:
        worse = ", ".join(
            f"{key} (than {' and '.join(r for r in ('served', 'gate') if r in found)})"
            for key, found in sorted(refitted.regressions.items())
        )
        reason = quote(f"shadow stage: the candidate's weights are worse on {worse}", safe="")
        await _admin(swap, "DELETE", f"/admin/canary?reason={reason}")
    else:
        await _admin(swap, "POST", "/admin/canary/resume", {"learned_state": refitted.state})
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


async def release_figures(
    store: StoreBackend, since: datetime, release_id: str, local_target: str
) -> dict[str, Any]:
    """Each arm's verdicts on the requests the arms could answer differently (read back from
    the record), and the canary's harm: the candidate's share times live's accept minus the
    candidate's there (positive: the candidate cost users accepted answers)."""
    counts = {"candidate": [0, 0], "live": [0, 0]}  # accepted, judged
    share = None
    async for row in store.iter_inferences(InferenceFilter(since=since)):
        inf = row.inference
        if inf.release_id is None or not inf.release_id.startswith(release_id):
            continue
        if inf.release_arm not in counts or inf.release_p is None:
            continue
        other = inf.release_other_target
        differs = other != inf.route_target or local_target in (other, inf.route_target)
        verdict = verdict_of(row)
        if not differs or verdict is None:
            continue
        if inf.release_arm == "candidate":
            share = inf.release_p
        counts[inf.release_arm][0] += verdict
        counts[inf.release_arm][1] += 1
    rates = {arm: (a / n if n else None) for arm, (a, n) in counts.items()}
    harm = None
    c, live = rates["candidate"], rates["live"]
    if c is not None and live is not None and share is not None:
        harm = round(share * (live - c), 4)
    return {
        "arms": {arm: {"accepted": a, "verdicts": n} for arm, (a, n) in counts.items()},
        "accept": rates,
        "candidate_share": share,
        "harm": harm,
    }
