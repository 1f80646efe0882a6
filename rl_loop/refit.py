"""Routing that follows the model: refit the learned policy from outcomes after a promotion.

1. Outcomes (``rl_loop.outcomes``) of the rows whose consent allows training (a ``redact``
   row's text read scrubbed): live local answers with feedback (arm local), frontier
   answers with feedback (arm frontier), shadow answers verified with the injected verifier
   (arm local; verdicts cached by shadow id). With ``current_version_only`` the local arm counts
   only answers of the weights served now, since older weights say little about new ones.
   The steps of an agent episode, judged once as a whole, take their credit from its verdict
   (``rl_loop.episode_credit``): tool-bearing requests are learned from what the local model
   did at each step, not from the chat traffic around them.
2. Evidence for weights that just changed: right after a swap no user has seen the new
   weights, so (``gate_outcomes``) the gate's verified answers of the served weights on its
   held-out items count as local outcomes too. They are unbiased: held-out tasks and the time
   split's latest traffic were never trained on (recorded frontier prompts were, so answering
   those again would flatter the new weights).
   And (``inherit_indistinguishable``) for each class on which the gate cannot tell the new
   weights from the ones they replaced, except better by noise (``rl_loop.ship.
   indistinguishable_classes``), the replaced weights' local outcomes count too (``inherited``:
   class -> weights version). One step only: the replaced weights' own inherited evidence is
   not passed further down.
3. ``router.learned.fit`` -> a ``LearnedState`` whose version names the weights it was fitted
   for; written atomically to ``routing.learned.state_file``; recorded as a policy version; then
   ``POST {gateway}/admin/reload`` makes the gateway use it (every decision records the version).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from rl_loop.config import RefitConfig, window_start
from rl_loop.episode_credit import step_verdicts
from rl_loop.outcomes import (
    RecordedOutcome,
    VerdictCache,
    consented,
    iter_rows,
    live_texts,
    row_outcomes,
    verify_shadows,
)
from rl_loop.rewards import Verify
from router.learned import LearnedState, Outcome, fit
from router.request_text import RequestText
from traffic.export.pii import CachingScrubber
from traffic.store import InferenceFilter, PolicyVersionRecord, StoreBackend


@dataclass(slots=True)
class RefitReport:
    version: str
    state_file: str
    outcomes: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    gate_outcomes: int = 0
    inherited: dict[str, str] = field(default_factory=dict)
    reloaded: bool = False
    policy_version: str | None = None
    seconds: float = 0.0
    withheld: dict[str, int] = field(default_factory=dict)  # rows left out by their consent

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "state_file": self.state_file,
            "outcomes": self.outcomes,
            "gate_outcomes": self.gate_outcomes,
            "withheld": self.withheld,
            "inherited": dict(sorted(self.inherited.items())),
            "reloaded": self.reloaded,
            "policy_version": self.policy_version,
            "seconds": round(self.seconds, 2),
        }


@dataclass(frozen=True, slots=True)
class Gathered:
    """The window's outcomes and the live mix the threshold is weighted to."""

    outcomes: list[RecordedOutcome]
    live: list[RequestText]
    withheld: dict[str, int] = field(default_factory=dict)  # rows left out by consent


async def gather_outcomes(
    store: StoreBackend,
    *,
    verify: Verify | None,
    cache: VerdictCache,
    config: RefitConfig,
    local_target: str,
    frontier_prefix: str,
) -> Gathered:
    """Every outcome recorded in the last ``config.window_days`` (step 2, before any version
    filter), and the latest ``config.live_mix_requests`` requests' texts."""
    since = window_start(datetime.now(UTC), config.window_days)
    read = [row async for row in iter_rows(store, InferenceFilter(ok_only=True, since=since))]
    rows, withheld = consented(read)
    scrubber = CachingScrubber()

    def scrub(text: str) -> str:
        return scrubber(text)[0]

    if verify is not None:
        await asyncio.to_thread(verify_shadows, rows, verify, cache, local_target)
        cache.save()
    credits = step_verdicts(rows, local_target=local_target, frontier_prefix=frontier_prefix)
    out: list[RecordedOutcome] = []
    for row in rows:
        out += row_outcomes(
            row,
            class_tags=list(config.class_tags),
            local_target=local_target,
            frontier_prefix=frontier_prefix,
            cache=cache,
            credit=credits.get(row.inference.id),
            scrub=scrub,
        )
    live = live_texts(rows, config.live_mix_requests, scrub)
    return Gathered(out, live, withheld)


def fit_state(
    outcomes: Sequence[RecordedOutcome],
    version: str,
    *,
    weights_version: str | None,
    current_version_only: bool,
    extra: Sequence[Outcome] = (),
    inherited: Mapping[str, str] | None = None,
    live: Sequence[RequestText] = (),
) -> LearnedState:
    """Step 3's fit, keeping local outcomes of ``weights_version`` only when asked, plus those
    of ``inherited[class]`` for the classes it names (step 2); ``live``: the live mix."""
    inherited = inherited or {}
    kept = list(extra) + [
        Outcome(o.class_key, o.arm, o.accepted, text=o.text, propensity=o.propensity)
        for o in outcomes
        if o.arm == "frontier"
        or not current_version_only
        or weights_version is None
        or o.weights_version == weights_version
        or (o.weights_version is not None and inherited.get(o.class_key) == o.weights_version)
    ]
    return fit(kept, version, live=live)


def write_state(state: LearnedState, path: Path) -> None:
    """Write the state file atomically (the gateway may read it at any moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2, sort_keys=True))
    os.replace(tmp, path)


async def reload_gateway(gateway_url: str, admin_token: str) -> str:
    """``POST /admin/reload``; returns the policy version the gateway now decides with."""
    async with httpx.AsyncClient(timeout=60.0) as client:
        response = await client.post(
            f"{gateway_url.rstrip('/')}/admin/reload",
            # The change log names the automation that reloaded (gateway.admin.changes).
            headers={"authorization": f"Bearer {admin_token}", "x-switchyard-actor": "flywheel"},
        )
    if response.status_code != 200:
        raise RuntimeError(f"gateway reload failed ({response.status_code}): {response.text}")
    return str(response.json()["policy_version"])


async def refit_policy(
    store: StoreBackend,
    *,
    state_file: Path,
    weights_version: str | None,
    verify: Verify | None,
    config: RefitConfig,
    local_target: str,
    frontier_prefix: str,
    cache: VerdictCache,
    gateway_url: str | None = None,
    admin_token: str | None = None,
    version: str | None = None,
    extra: Sequence[Outcome] = (),
    inherited: Mapping[str, str] | None = None,
) -> RefitReport:
    """Outcomes (plus ``extra``, e.g. the gate's, and the ``inherited`` classes' outcomes of
    the weights named there) -> fitted state -> state file -> policy version -> reload."""
    started = time.perf_counter()
    gathered = await gather_outcomes(
        store,
        verify=verify,
        cache=cache,
        config=config,
        local_target=local_target,
        frontier_prefix=frontier_prefix,
    )
    version = version or f"fit-{int(time.time())}-{weights_version or 'any'}"
    state = fit_state(
        gathered.outcomes,
        version,
        weights_version=weights_version,
        current_version_only=config.current_version_only,
        extra=extra,
        inherited=inherited,
        live=gathered.live,
    )
    write_state(state, state_file)
    await store.upsert_policy_version(
        PolicyVersionRecord(id=version, config=state.to_json(), status="active")
    )
    report = RefitReport(
        version,
        str(state_file),
        gate_outcomes=len(extra),
        inherited=dict(inherited or {}),
        withheld=gathered.withheld,
    )
    counts: Counter[tuple[str, str, bool]] = Counter()
    for arms_key, arms in state.classes.items():
        for arm, c in arms.items():
            counts[(arms_key, arm, True)] = int(c.accepted)
            counts[(arms_key, arm, False)] = int(c.rejected)
    for (key, arm, accepted), n in counts.items():
        entry = report.outcomes.setdefault(key, {}).setdefault(arm, [0, 0])
        entry[0 if accepted else 1] = n
    if gateway_url and admin_token:
        report.policy_version = await reload_gateway(gateway_url, admin_token)
        report.reloaded = True
    report.seconds = time.perf_counter() - started
    return report
