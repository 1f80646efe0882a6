"""``make bench-routing``: the learned router against always-frontier, always-local, random and
a family oracle, on the recorded traffic of a flywheel run (real clients' requests: no tags).

    python -m loadtests.bench_routing [--run DIR] [--out DIR] [--fit-share 0.6]

Input, a flywheel run directory (default: the newest ``.cache/flywheel/run-*``):
``traffic.db`` (the gateway's record), ``labels.json`` (the IDE client's own bookkeeping,
inference id -> family / task id / split; never sent, so only this benchmark knows a request's
family), the RL loop's verdict cache of shadow answers, ``switchyard.yaml`` (targets, prices,
``min_samples``; optional: without it, targets ``local`` / ``frontier`` and no prices).

Method
1. Time split. The successful requests in id order (UUIDv7: creation time) are cut at
   ``--fit-share`` of their count: fit window = the first 60%, evaluation window = the rest. By
   count, not wall time: the flywheel's traffic comes in rounds with training pauses between.
2. Fit window -> ``ours``: the outcomes the RL loop's refit reads (``rl_loop.outcomes.
   row_outcomes``: live answers with feedback, both arms, and verified shadow answers, arm
   local), of the local weights served at the end of the window only, as the refit's
   ``current_version_only`` keeps them (``--all-weights``: every version's), fitted by
   ``router.learned.fit`` (the production code, calibration hold-out included). The production
   operating point is the threshold ``router.learned.LearnedPolicy`` derives at
   quality_target 0.95. Fit window -> the family oracle: each family's local accept rate over
   the same local outcomes, Beta(1, 1)-smoothed, by the client's labels.
3. Evaluation items: every evaluation-window request with a recorded local verdict.
   - Served locally (the production router's choice or its exploration) with user feedback:
     local verdict and cost recorded; the frontier's are its accept rate and mean cost on that
     family over the record (``FrontierPrior``): an expectation, which is all a mean needs.
   - Served by the frontier with user feedback and a verified local shadow answer: both
     verdicts recorded (``paired``). Local cost: the local backend's prices applied to the
     request's recorded prompt tokens (the frontier's count of the same prompt) and the shadow
     answer's completion tokens (without prices: the mean recorded cost of live local answers).
     A shadow answer without a verdict (the RL loop verifies at each refit, and none follows
     the last traffic round) is verified here with the task families' verifier, by the
     client's task id, as the flywheel's injected verifier does; the run's files stay as they
     are.
   Weights: each locally served request is an item, a frontier-served one only when the
   gateway shadowed it, with probability ``share x (0.25 + 3 p (1 - p))`` at its decision's
   ``p_local``; weighting those by the inverse (Horvitz-Thompson) makes the items stand for all
   the evaluation window's requests with feedback. ``--paired-only`` keeps only paired items,
   i.e. the frontier-served part of the traffic: once the production router has learned a
   family it sends that family local and it has no paired item left (a quick flywheel run: 0
   of ~590 learnable-family requests in its evaluation window), hence not the default.
4. Policies, curves, APGR, targets: ``loadtests/routing_report.py``. AUC (weighted): ours'
   ``p_local`` against the items' local verdicts (also the oracle's family rates, for
   reference: the best a family-level ranking does).
5. Decision cost: ``router.scorer_bench.bench_scorer`` (one caller, the typical 1.75 KB IDE
   request); the fitted scorer on the same request from 16 concurrent tasks on one event loop,
   which is how the gateway runs it (``policy.decide`` is synchronous on the loop): per call,
   and queued, from a request's arrival to its decision with the 15 others' decisions ahead of
   it (about 16 calls: what 16 simultaneous requests add to the loop, reported, not judged
   against the per-call target); and the fitted scorer on the evaluation items' own texts.

Caveats: the local weights change between rounds, so both ours and the oracle learn from older
weights' verdicts than those they are judged on; shadow calls skipped for lack of room
(``shadow.max_in_flight``) make the weights slightly too small.

Output: a table per policy, the targets, a per-family table, ``bench-routing.png`` and
``bench-routing.json`` in ``--out`` (default: the run directory); progress on stderr; the last
line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
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

from gateway.store import InferenceFilter, InferenceRow, StoreConfig, open_store
from loadtests import routing_report as rr
from loadtests.tasks import TaskIdError, task_from_id, verify_reply
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
from router.learned import LearnedPolicy, LearnedState, Outcome, fit
from router.policy import RulePolicy
from router.request_text import RequestText
from router.scorer import Scorer, shadow_share
from router.scorer_bench import bench_request, bench_scorer

REPO = Path(__file__).resolve().parents[1]
FIT_SHARE = 0.6
CONCURRENCY = 16
SCORER_CALLS = 5000
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


def newest_run(flywheel_dir: Path) -> Path:
    """The newest finished run (its report.json written), else the newest with a record."""
    runs = sorted(p for p in flywheel_dir.glob("run-*") if (p / "traffic.db").exists())
    if not runs:
        raise BenchError(
            f"no flywheel run with a traffic.db under {flywheel_dir}; record one first with "
            "`FLYWHEEL_QUICK=1 make flywheel`, or name a run with --run DIR"
        )
    finished = [p for p in runs if (p / "report.json").exists()]
    return (finished or runs)[-1]


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
    """Verify the local shadow answers that have no verdict yet (the last round's: the RL loop
    verifies at its refit, and none follows the last round) with the task families' verifier,
    by the client's task id; into the in-memory cache only (the run's files stay as they are).
    Returns how many were verified."""
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


def fit_ours(outcomes: Sequence[RecordedOutcome], inputs: RunInputs) -> tuple[Scorer, float]:
    """The production fit and the threshold the gateway would route with."""
    state: LearnedState = fit(
        (Outcome(o.class_key, o.arm, o.accepted, text=o.text) for o in outcomes), "bench-routing"
    )
    if state.scorer is None:
        raise BenchError("the fit window has no local outcome with text: nothing to fit")
    targets = (inputs.learned.local_target, inputs.learned.frontier_target)
    routing = RoutingConfig(
        version="bench-routing", default=targets[1], aliases={"auto": None}, learned=inputs.learned
    )
    policy = LearnedPolicy(RulePolicy(routing, targets), inputs.learned, state)
    return state.scorer, policy.threshold


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


def shadow_probability(policy_reason: str | None, share: float) -> float:
    """The chance that the gateway shadowed a frontier-served request, at the decision's
    ``p_local`` (recorded in its reason): ``router.scorer.shadow_share``, as the gateway."""
    found = _P_LOCAL.search(policy_reason or "")
    return shadow_share(share, None if found is None else float(found.group(1)))


def eval_items(
    rows: Sequence[InferenceRow], inputs: RunInputs, scorer: Scorer, prior: FrontierPrior
) -> tuple[list[rr.EvalItem], list[int]]:
    """The evaluation items (module docstring, 3.) and the predict times (ns) of ours on their
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
            weight = 1.0 if share is None else 1.0 / shadow_probability(inf.policy_reason, share)
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


# ---------------------------------------------------------------- decision cost


def _p50_p99_us(ns: Sequence[int]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.asarray(ns, dtype=np.float64) / 1000.0, [50, 99])
    return round(float(p50), 1), round(float(p99), 1)


async def _concurrent(
    scorer: Scorer, text: RequestText, callers: int, calls: int
) -> dict[str, Any]:
    per_call: list[int] = []
    queued: list[int] = []

    async def caller() -> None:
        for _ in range(calls):
            arrived = time.perf_counter_ns()
            await asyncio.sleep(0)  # the other callers' decisions run here, as on the gateway
            t0 = time.perf_counter_ns()
            scorer.predict_local(text)
            t1 = time.perf_counter_ns()
            per_call.append(t1 - t0)
            queued.append(t1 - arrived)

    await asyncio.gather(*(caller() for _ in range(callers)))
    p50, p99 = _p50_p99_us(per_call)
    q50, q99 = _p50_p99_us(queued)
    return {
        "callers": callers,
        "n": len(per_call),
        "predict_p50_us": p50,
        "predict_p99_us": p99,
        "queued_p50_us": q50,
        "queued_p99_us": q99,
    }


def decision_cost(scorer: Scorer, calls: int, recorded_ns: Sequence[int]) -> dict[str, Any]:
    one = bench_scorer(n=calls)
    text = bench_request()
    for _ in range(200):
        scorer.predict_local(text)
    many = asyncio.run(_concurrent(scorer, text, CONCURRENCY, max(1, calls // CONCURRENCY)))
    r50, r99 = _p50_p99_us(recorded_ns) if recorded_ns else (0.0, 0.0)
    return {
        "one_caller": one,
        "concurrent": many,
        "recorded_texts": {"n": len(recorded_ns), "predict_p50_us": r50, "predict_p99_us": r99},
    }


# ---------------------------------------------------------------- the benchmark


def run_benchmark(
    run: Path,
    out: Path,
    fit_share: float,
    scorer_calls: int,
    paired_only: bool = False,
    all_weights: bool = False,
) -> dict[str, Any]:
    started = time.perf_counter()
    inputs = read_inputs(run)
    log(f"reading {run / 'traffic.db'}")
    rows = asyncio.run(read_rows(run))
    if len(rows) < 10:
        raise BenchError(f"{run / 'traffic.db'} holds {len(rows)} successful requests; too few")
    verified = verify_missing(rows, inputs)
    log(f"verified {verified} shadow answers that had no verdict yet")
    cut = round(fit_share * len(rows))
    fit_rows, eval_rows = rows[:cut], rows[cut:]
    outcomes = outcomes_of(fit_rows, inputs)
    weights = "every version"
    if not all_weights:
        outcomes, latest = served_weights_only(outcomes)
        weights = latest or "the base weights (no version recorded)"
    log(
        f"{len(rows)} requests: fit on {len(fit_rows)} ({len(outcomes)} outcomes), "
        f"evaluate on {len(eval_rows)}; local outcomes of {weights}"
    )
    scorer, threshold = fit_ours(outcomes, inputs)
    rates = family_rates(outcomes, inputs.labels)
    prior = FrontierPrior.of(rows, inputs)
    items, predict_ns = eval_items(eval_rows, inputs, scorer, prior)
    if paired_only:
        kept = [i for i, item in enumerate(items) if item.paired]
        items, predict_ns = [items[i] for i in kept], [predict_ns[i] for i in kept]
    if len({i.local_accepted for i in items}) < 2:
        raise BenchError(
            f"the evaluation window has {len(items)} items, not both accepted and rejected local "
            "answers among them; record a longer run"
        )
    paired = sum(i.paired for i in items)
    log(
        f"{len(items)} evaluation items ({paired} with both verdicts recorded); production "
        f"threshold {threshold:.3f}"
    )
    policies, curves, points, auc_ours = rr.evaluate(items, rates, threshold)
    log(f"decision cost ({scorer_calls} calls, then {CONCURRENCY} concurrent callers) ...")
    cost = decision_cost(scorer, scorer_calls, predict_ns)
    p99 = {
        "one_caller": float(cost["one_caller"]["predict_p99_us"]),
        f"{CONCURRENCY}_concurrent": float(cost["concurrent"]["predict_p99_us"]),
    }
    requests = Counter(inputs.labels.get(r.inference.id, UNLABELLED) for r in eval_rows)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "bench-routing.png"
    floor = rr.QUALITY_TARGET * points[rr.ALWAYS_FRONTIER]["accept_rate"]
    rr.plot(curves, points, floor, png)
    report = {
        "run": str(run),
        "requests": len(rows),
        "fit_requests": len(fit_rows),
        "eval_requests": len(eval_rows),
        "eval_items": len(items),
        "paired_items": paired,
        "items": "paired only" if paired_only else "every local verdict (module docstring, 3.)",
        "shadow_weights": "unweighted (no shadow.share)"
        if inputs.shadow_share is None
        else f"1 / shadow probability (share {inputs.shadow_share:g})",
        "shadows_verified_here": verified,
        "fit_local_weights": weights,
        "fit_outcomes": dict(Counter(f"{o.arm}:{o.source}" for o in outcomes)),
        "split": f"first {fit_share:g} of the requests by id (time) fit, the rest evaluate",
        "apgr_axis": "share of calls to the frontier (RouteLLM), exact area",
        "quality_target": rr.QUALITY_TARGET,
        "local_prices_usd_per_mtok": inputs.local_prices,
        "auc_ours": round(auc_ours, 4),
        "policies": policies,
        "families": rr.family_figures(items, rates, requests, threshold),
        "decision_cost": cost,
        "targets": rr.targets(policies, auc_ours, p99),
        "png": str(png),
        "wall_s": round(time.perf_counter() - started, 1),
    }
    (out / "bench-routing.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--run", type=Path, default=None, help="flywheel run directory")
    parser.add_argument("--out", type=Path, default=None, help="default: the run directory")
    parser.add_argument("--fit-share", type=float, default=FIT_SHARE)
    parser.add_argument("--scorer-calls", type=int, default=SCORER_CALLS)
    parser.add_argument(
        "--paired-only",
        action="store_true",
        help="evaluate only requests with both verdicts recorded (frontier-served, shadowed)",
    )
    parser.add_argument(
        "--all-weights",
        action="store_true",
        help="fit on every local weights version's outcomes, not only the last served one's",
    )
    args = parser.parse_args(argv)
    if not 0 < args.fit_share < 1:
        parser.error("--fit-share must be between 0 and 1")
    cache = Path(os.environ.get("SWITCHYARD_CACHE", REPO / ".cache"))
    flywheel_dir = Path(os.environ.get("FLYWHEEL_DIR", cache / "flywheel"))
    try:
        run = (args.run or newest_run(flywheel_dir)).resolve()
        out = args.out or run
        calls = max(1, args.scorer_calls)
        report = run_benchmark(run, out, args.fit_share, calls, args.paired_only, args.all_weights)
    except BenchError as exc:
        print(f"bench-routing: {exc}", file=sys.stderr)
        return 2
    print(rr.format_report(report))
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
