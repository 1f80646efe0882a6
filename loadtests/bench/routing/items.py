"""What ``make bench-routing`` (``loadtests/bench/routing/run.py``) reads of a flywheel run, and the
fit outcomes and evaluation items it builds from it.

Input, a flywheel run directory: ``traffic.db`` (the gateway's record), ``labels.json`` (the IDE
client's own bookkeeping, inference id -> family / task id / split; never sent, so only this
benchmark knows a request's family), the RL loop's verdict cache of shadow answers,
``switchyard.yaml`` (targets, prices, ``min_samples``; optional: without it, targets ``local`` /
``frontier`` and no prices).

Missing verdicts. A shadow answer without a verdict (the RL loop verifies at each refit, and none
follows the last traffic round) is verified here with the task families' verifier, by the
client's task id, as the flywheel's injected verifier does; into the in-memory cache only, the
run's files stay as they are.

Fit outcomes (of the fit window's requests): the outcomes the RL loop's refit reads
(``rl_loop.outcomes.row_outcomes``: live answers with feedback, both arms, and verified shadow
answers, arm local), by default of the local weights served at the end of the window only, as
the refit's ``current_version_only`` keeps them. The family oracle's rates: each family's local
accept rate over the same local outcomes, Beta(1, 1)-smoothed, by the client's labels.

Evaluation items: every evaluation-window request with a recorded local verdict.
- Served locally (the production router's choice or its exploration) with user feedback: local
  verdict and cost recorded; the frontier's are its accept rate and mean cost on that family
  over the record (``FrontierPrior``): an expectation, which is all a mean needs.
- Served by the frontier with user feedback and a verified local shadow answer: both verdicts
  recorded (``paired``). Local cost: the local backend's prices applied to the request's
  recorded prompt tokens (the frontier's count of the same prompt) and the shadow answer's
  completion tokens (without prices: the mean recorded cost of live local answers).
Weights: each locally served request is an item, a frontier-served one only when the gateway
shadowed it, with probability ``share x (0.25 + 3 p (1 - p))`` at its decision's ``p_local``;
weighting those by the inverse (Horvitz-Thompson) makes the items stand for all the evaluation
window's requests with feedback. Shadow calls skipped for lack of room
(``shadow.max_in_flight``) make the weights slightly too small. Keeping only the paired items
(``--paired-only``) keeps the frontier-served part of the traffic: once the production router
has learned a family it sends that family local and it has no paired item left (a quick
flywheel run: 0 of ~590 learnable-family requests in its evaluation window), hence not the
default.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from loadtests.bench.routing import report as rr
from rl_loop.outcomes import (
    RecordedOutcome,
    VerdictCache,
    answer_text,
    arm_of_target,
    recorded_text,
    row_outcomes,
    shadow_verdict,
    verdict_of,
)
from rl_loop.replay import VERDICTS_FILE
from router.config import LearnedConfig, RoutingConfig
from router.scorer import Scorer, shadow_share
from tasks.ide import TaskIdError, task_from_id, verify_reply
from traffic.store import InferenceFilter, InferenceRecord, InferenceRow, StoreConfig, open_store

LABELS_FILE = "labels.json"
UNLABELLED = "unlabelled"
DEFAULT_TARGETS = ("local", "frontier")  # the flywheel's, when the run has no switchyard.yaml


class BenchError(RuntimeError):
    """The run cannot be benchmarked; the message says what to do."""


def log(message: str) -> None:
    print(f"[bench-routing {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the run's inputs


@dataclass(frozen=True, slots=True)
class RunInputs:
    run: Path
    labels: dict[str, str]  # inference id -> family
    task_ids: dict[str, str]  # inference id -> task id (to verify shadow answers)
    cache: VerdictCache
    learned: LearnedConfig  # quality_target set to the benchmark's
    local_prices: tuple[float, float] | None  # USD per million tokens, in / out
    shadow_share: float | None  # the gateway's shadow.share (None: unknown, items unweighted)

    @property
    def local_target(self) -> str:
        return self.learned.local_target

    @property
    def frontier_prefix(self) -> str:
        return self.learned.frontier_target


def read_inputs(run: Path) -> RunInputs:
    if not (run / "traffic.db").exists():
        raise BenchError(f"{run} has no traffic.db (expected a flywheel run directory)")
    labels_path = run / LABELS_FILE
    if not labels_path.exists():
        raise BenchError(f"{labels_path} is missing: the family oracle needs the client's labels")
    raw = {str(k): v for k, v in json.loads(labels_path.read_text()).items()}
    entries = {k: v for k, v in raw.items() if isinstance(v, Mapping)}
    labels = {k: str(v.get("family") or UNLABELLED) for k, v in entries.items()}
    task_ids = {k: str(v["task_id"]) for k, v in entries.items() if v.get("task_id")}
    learned = LearnedConfig(local_target=DEFAULT_TARGETS[0], frontier_target=DEFAULT_TARGETS[1])
    prices: tuple[float, float] | None = None
    shadow_share: float | None = None
    config_path = run / "switchyard.yaml"
    if config_path.exists():
        data = yaml.safe_load(config_path.read_text())
        routing = RoutingConfig.model_validate(data["routing"])
        learned = routing.learned or learned
        spec = data.get("backends", {}).get(learned.local_target, {})
        price_in, price_out = spec.get("input_usd_per_mtok"), spec.get("output_usd_per_mtok")
        if price_in is not None or price_out is not None:
            prices = (float(price_in or 0.0), float(price_out or 0.0))
        shadow = data.get("shadow") or {}
        if shadow.get("target") == learned.local_target and float(shadow.get("share", 0)) > 0:
            shadow_share = float(shadow["share"])
    learned = learned.model_copy(update={"quality_target": rr.QUALITY_TARGET})
    cache = VerdictCache(run / VERDICTS_FILE)
    return RunInputs(run, labels, task_ids, cache, learned, prices, shadow_share)


async def read_rows(run: Path) -> list[InferenceRow]:
    store = open_store(StoreConfig(url=f"sqlite:///{run / 'traffic.db'}"))
    await store.connect()
    try:
        filters = InferenceFilter(ok_only=True)
        return [row async for row in store.iter_inferences(filters, with_shadows=True)]
    finally:
        await store.close()


def verify_missing(rows: Sequence[InferenceRow], inputs: RunInputs) -> int:
    """Verify the local shadow answers that have no verdict yet (module docstring, missing
    verdicts). Returns how many were verified."""
    done = 0
    for row in rows:
        task_id = inputs.task_ids.get(row.inference.id)
        for shadow in row.shadows:
            if (
                task_id is None
                or shadow.target != inputs.local_target
                or shadow_verdict(shadow, inputs.cache) is not None
            ):
                continue
            try:
                task = task_from_id(task_id)
            except (TaskIdError, ValueError):
                break
            passed = verify_reply(task, answer_text(shadow.response)).passed
            inputs.cache.data[shadow.id] = bool(passed)
            done += 1
    return done


# ---------------------------------------------------------------- fit window


def outcomes_of(rows: Sequence[InferenceRow], inputs: RunInputs) -> list[RecordedOutcome]:
    """What the RL loop's refit reads of these rows (no tags: class key ``*``)."""
    out: list[RecordedOutcome] = []
    for row in rows:
        out += row_outcomes(
            row,
            class_tags=[],
            local_target=inputs.local_target,
            frontier_prefix=inputs.frontier_prefix,
            cache=inputs.cache,
        )
    return out


def served_weights_only(
    outcomes: Sequence[RecordedOutcome],
) -> tuple[list[RecordedOutcome], str | None]:
    """The frontier outcomes and the local outcomes of the weights that answered last (the
    refit's ``current_version_only``), and that version."""
    local = [o for o in outcomes if o.arm == "local"]
    if not local:
        return list(outcomes), None
    latest = local[-1].weights_version
    kept = [o for o in outcomes if o.arm == "frontier" or o.weights_version == latest]
    return kept, latest


def family_rates(outcomes: Sequence[RecordedOutcome], labels: Mapping[str, str]) -> dict[str, Any]:
    """Per family: local accepted / rejected of the fit window and the smoothed rate."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for o in outcomes:
        if o.arm == "local":
            counts[labels.get(o.inference_id, UNLABELLED)][0 if o.accepted else 1] += 1
    return {
        f: {"accepted": a, "rejected": r, "rate": (1 + a) / (2 + a + r)}
        for f, (a, r) in sorted(counts.items())
    }


# ---------------------------------------------------------------- evaluation window


@dataclass(frozen=True, slots=True)
class FrontierPrior:
    """What the frontier would have got on a request it did not answer: per family, its accept
    rate (smoothed toward the overall one with 2 pseudo-answers) and mean recorded cost over
    every frontier answer with feedback in the record."""

    rates: dict[str, float]
    costs: dict[str, float]
    rate: float
    cost: float

    @classmethod
    def of(cls, rows: Sequence[InferenceRow], inputs: RunInputs) -> FrontierPrior:
        accepted: Counter[str] = Counter()
        answered: Counter[str] = Counter()
        spent: defaultdict[str, float] = defaultdict(float)
        for row in rows:
            inf = row.inference
            verdict = verdict_of(row)
            arm = arm_of_target(inf.route_target, inputs.local_target, inputs.frontier_prefix)
            if arm != "frontier" or verdict is None:
                continue
            family = inputs.labels.get(inf.id, UNLABELLED)
            accepted[family] += verdict
            answered[family] += 1
            spent[family] += inf.cost_usd or 0.0
        n = sum(answered.values())
        if n == 0:
            raise BenchError("the record holds no frontier answer with feedback")
        rate, cost = sum(accepted.values()) / n, sum(spent.values()) / n
        return cls(
            {f: (accepted[f] + 2 * rate) / (k + 2) for f, k in answered.items()},
            {f: spent[f] / k for f, k in answered.items()},
            rate,
            cost,
        )


_P_LOCAL = re.compile(r"p_local=([0-9.]+)")


def shadow_probability(inf: InferenceRecord, share: float) -> float:
    """The chance that the gateway shadowed a frontier-served request: as recorded
    (``shadow_p``), or for rows from before the store's migration 6 at the ``p_local`` their
    reason names (``router.scorer.shadow_share``, as the gateway)."""
    if inf.shadow_p:
        return inf.shadow_p
    found = _P_LOCAL.search(inf.policy_reason or "")
    return shadow_share(share, None if found is None else float(found.group(1)))


def eval_items(
    rows: Sequence[InferenceRow], inputs: RunInputs, scorer: Scorer, prior: FrontierPrior
) -> tuple[list[rr.EvalItem], list[int]]:
    """The evaluation items (module docstring) and the predict times (ns) of ours on their
    texts."""
    live_local = [
        r.inference.cost_usd
        for r in rows
        if r.inference.route_target == inputs.local_target and r.inference.cost_usd is not None
    ]
    mean_local = float(np.mean(live_local)) if live_local else 0.0
    if inputs.local_prices is None:
        log(f"no local prices in switchyard.yaml: local cost = mean recorded ${mean_local:.6f}")
    items: list[rr.EvalItem] = []
    predict_ns: list[int] = []
    for row in rows:
        inf = row.inference
        verdict = verdict_of(row)
        arm = arm_of_target(inf.route_target, inputs.local_target, inputs.frontier_prefix)
        if verdict is None or arm is None:
            continue
        family = inputs.labels.get(inf.id, UNLABELLED)
        if arm == "local":
            frontier = prior.rates.get(family, prior.rate)
            frontier_cost = prior.costs.get(family, prior.cost)
            local, local_cost, weight = verdict, inf.cost_usd or mean_local, 1.0
        else:
            shadows = [s for s in row.shadows if s.target == inputs.local_target]
            judged = [(s, v) for s in shadows if (v := shadow_verdict(s, inputs.cache)) is not None]
            if not judged:
                continue
            shadow, local = judged[0]
            frontier, frontier_cost = float(verdict), inf.cost_usd or 0.0
            local_cost = mean_local
            if inputs.local_prices is not None:
                completion = int(shadow.comparison.get("completion_tokens") or 0)
                price_in, price_out = inputs.local_prices
                local_cost = ((inf.prompt_tokens or 0) * price_in + completion * price_out) / 1e6
            share = inputs.shadow_share
            weight = 1.0 if share is None else 1.0 / shadow_probability(inf, share)
        text = recorded_text(inf)
        t0 = time.perf_counter_ns()
        p = scorer.predict_local(text)
        predict_ns.append(time.perf_counter_ns() - t0)
        items.append(
            rr.EvalItem(
                inf.id,
                family,
                frontier,
                local,
                frontier_cost,
                local_cost,
                p,
                weight,
                arm != "local",
            )
        )
    return items, predict_ns
