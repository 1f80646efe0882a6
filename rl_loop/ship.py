"""Steps 5-6 of a round: the candidate shipped (or not), then routing refitted for what is served.

5. Shipping, when the gate passed:
   - without a release (``loop.release.enabled`` false, or one replica): the hot-swap of every
     replica (``rl_loop.promote``), and the refit below reloads routing for all traffic;
   - as a release (``rl_loop.release_stage``): the scorer fitted for the candidate's weights
     first, then the candidate's weights and that routing as a canary arm on part of the
     replicas and traffic, promoted or rolled back by the gateway's sequential test on users'
     verdicts (fail safe: rolled back when the traffic ends without a decision).
   A rejected candidate is recorded ``rejected``.
6. Refit of the learned routing (``rl_loop.refit``): recorded outcomes plus the gate's
   held-out answers of the weights now served, state file, gateway reload.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from rl_loop.config import LoopConfig
from rl_loop.evaluate import ModelEval
from rl_loop.loop import AgentEvidence, Candidate, Services
from rl_loop.model_registry import record_checkpoint
from rl_loop.outcomes import VerdictCache
from rl_loop.promote import promote
from rl_loop.refit import RefitReport, refit_policy
from rl_loop.release_stage import Refitted, ReleaseTraffic, release_candidate
from rl_loop.rewards import Verify
from rl_loop.served_format import in_served_format
from rl_loop.shadow_gate import shadow_regressions
from router.features import RequestFeatures
from router.learned import LearnedState, Outcome, class_key
from serving.build import read_version
from serving.hotswap import HotSwapConfig


async def ship_candidate(
    candidate: Candidate,
    services: Services,
    config: LoopConfig,
    *,
    verify: Verify,
    cache: VerdictCache,
    agent_evidence: AgentEvidence | None = None,
    drive: ReleaseTraffic | None = None,
) -> Path:
    """Steps 5-6 (module docstring). Returns the checkpoint served afterwards.
    ``agent_evidence``: the served checkpoint's held-out agent steps as local outcomes
    (``rl_loop.agent_evidence``), added to the refit with the gate's other outcomes
    (``refit.gate_outcomes``); ``drive``: users' traffic during a release (required for one)."""
    result = candidate.result
    started = time.perf_counter()
    exported_from = None
    if candidate.passed:  # the replicas' format: an fp8 export when they serve one
        published = await asyncio.to_thread(
            in_served_format,
            candidate.candidate_dir,
            candidate.served_dir,
            config.work_dir / "exports",
        )
        if published != candidate.candidate_dir:
            exported_from = result.candidate
            result.candidate = read_version(published).version_id
            candidate = dataclasses.replace(candidate, candidate_dir=published)
    now_served = candidate.served_dir
    swap_config = HotSwapConfig(
        gateway_url=services.gateway_url,
        admin_token=services.admin_token,
        target=services.local_target,
        served_model_name=config.served_model_name,
        actor="flywheel",
    )
    releasing = config.release.enabled and len(services.replicas) > config.release.canary_replicas
    if candidate.passed and releasing:
        if drive is None:
            raise ValueError("a release needs users' traffic: pass drive")
        state_file = config.work_dir / f"round-{result.round}" / "candidate_state.json"
        fitted = await refit_round(
            services, config, candidate, verify, cache, state_file=state_file
        )
        gate_state = await asyncio.to_thread(read_state, state_file)  # before the shadows

        async def refit_with_shadows(since: datetime) -> Refitted:
            await refit_round(services, config, candidate, verify, cache, state_file=state_file)
            state = json.loads(await asyncio.to_thread(state_file.read_bytes))
            live = await asyncio.to_thread(read_state, services.state_file)
            regressions = await shadow_regressions(
                services.record,
                since,
                str(result.candidate),
                {"served": live, "gate": gate_state},
                class_tags=list(config.refit.class_tags),
                local_target=services.local_target,
                frontier_prefix=config.data.frontier_prefix,
                cache=cache,
            )
            return Refitted(state, regressions)

        outcome = await release_candidate(
            result.round,
            candidate.candidate_dir,
            candidate.served_dir,
            services.replicas,
            state_file,
            services.store,
            swap_config,
            config,
            drive,
            refit_with_shadows,
        )
        result.swap = {"release": outcome.to_json(), "candidate_routing": fitted.version}
        if outcome.promoted:
            now_served, result.promoted = candidate.candidate_dir, True
    elif candidate.passed:
        swap = await promote(
            services.store,
            candidate.candidate_dir,
            candidate.served_dir,
            services.replicas,
            swap_config,
        )
        result.swap = {
            "ok": swap.ok,
            "rolled_back": swap.rolled_back,
            "seconds": round(swap.seconds, 2),
            "replicas": [
                {
                    "replica": r.replica,
                    "outcome": r.outcome,
                    "error": r.error,
                    "probe_mean_abs": r.probe.mean_abs_diff if r.probe else None,
                }
                for r in swap.replicas
            ],
        }
        if swap.ok:
            now_served, result.promoted = candidate.candidate_dir, True
    else:
        await record_checkpoint(services.store, candidate.candidate_dir, "rejected")
    result.served_after = read_version(now_served).version_id
    if exported_from is not None:
        result.swap["exported_from"] = exported_from
    result.seconds["swap"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    agent_outcomes: Sequence[Outcome] = ()
    if agent_evidence is not None and config.refit.gate_outcomes:
        agent_outcomes = await agent_evidence(now_served, config.refit.class_tags)
    refit = await refit_round(
        services, config, candidate, verify, cache, agent_outcomes=agent_outcomes
    )
    result.refit = refit.to_json()
    result.seconds["refit"] = round(time.perf_counter() - started, 1)
    out = config.work_dir / f"round-{result.round}"
    (out / "round.json").write_text(json.dumps(result.to_json(), indent=2, default=str))
    return now_served


def read_state(path: Path) -> LearnedState:
    """The live routing's learned state (unfitted when none was written yet; blocking)."""
    if not path.exists():
        return LearnedState("unfitted")
    return LearnedState.from_json(json.loads(path.read_bytes()))


def gate_outcomes(evaluation: ModelEval, class_tags: Sequence[str]) -> list[Outcome]:
    """The gate's verified answers as local outcomes of the evaluated weights (refit step 2)."""
    out = []
    for item in evaluation.items:
        features = RequestFeatures("chat.completions", "auto", 0, tags=item.tags)
        key = class_key(features, list(class_tags))
        out.append(Outcome(key, "local", item.passed, text=item.text))
    return out


def indistinguishable_classes(
    current: ModelEval, candidate: ModelEval, class_tags: Sequence[str]
) -> set[str]:
    """Routing classes on which the gate cannot tell ``candidate`` from ``current`` except in
    its favour by noise: on the same items, it passed at least as many, and at most
    ``2 * sqrt(d)`` more, where ``d`` counts the items the two judged differently (McNemar's
    test at about the 5% level). A clearly better candidate is excluded too: the replaced
    weights' evidence would understate it."""
    pairs: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for before, after in zip(
        gate_outcomes(current, class_tags), gate_outcomes(candidate, class_tags), strict=True
    ):
        if before.class_key != after.class_key:
            raise ValueError("the two evaluations did not answer the same items")
        pairs[after.class_key].append((before.accepted, after.accepted))
    out = set()
    for key, judged in pairs.items():
        gained = sum(a and not b for b, a in judged)
        lost = sum(b and not a for b, a in judged)
        if gained >= lost and gained - lost <= 2 * math.sqrt(gained + lost):
            out.add(key)
    return out


async def refit_round(
    services: Services,
    config: LoopConfig,
    candidate: Candidate,
    verify: Verify,
    cache: VerdictCache,
    *,
    agent_outcomes: Sequence[Outcome] = (),
    state_file: Path | None = None,
) -> RefitReport:
    """Refit the learned routing for the weights served after the round (the candidate's when
    promoted) and reload the gateway; with ``state_file``, for the candidate's weights into
    that file, with no reload (a release's candidate routing). The gate's answers of those
    weights join the outcomes; a promoted candidate inherits the replaced weights' evidence on
    the classes the gate cannot tell them apart on."""
    result = candidate.result
    for_candidate = state_file is not None or result.promoted
    weights = result.candidate if state_file is not None else result.served_after
    evaluation = candidate.candidate_eval if for_candidate else candidate.current_eval
    inherited: dict[str, str] = {}
    if for_candidate and config.refit.inherit_indistinguishable:
        classes = indistinguishable_classes(
            candidate.current_eval, candidate.candidate_eval, config.refit.class_tags
        )
        inherited = dict.fromkeys(sorted(classes), result.served_before)
    extra = gate_outcomes(evaluation, config.refit.class_tags) if config.refit.gate_outcomes else []
    extra += agent_outcomes
    reload = state_file is None
    return await refit_policy(
        services.record,
        state_file=state_file or services.state_file,
        weights_version=weights,
        verify=verify,
        config=config.refit,
        local_target=services.local_target,
        frontier_prefix=config.data.frontier_prefix,
        cache=cache,
        gateway_url=services.gateway_url if reload else None,
        admin_token=services.admin_token if reload else None,
        version=f"fit-r{result.round}-{weights}{'' if reload else '-candidate'}",
        extra=extra,
        inherited=inherited,
    )
