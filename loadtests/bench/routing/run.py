"""``make bench-routing``: the learned router against always-frontier, always-local, random and
a family oracle, on the recorded traffic of a flywheel run (real clients' requests: no tags).

    python -m loadtests.bench.routing [--run DIR] [--out DIR] [--fit-share 0.6]

Input, a flywheel run directory (default: the newest ``.cache/flywheel/run-*``): its record,
the IDE client's labels, the RL loop's verdict cache and ``switchyard.yaml``; what is read of
each, which outcomes and items are built and how each verdict, cost and weight is obtained:
:mod:`~loadtests.bench.routing.items`.

Method
1. Time split. The successful requests in id order (UUIDv7: creation time) are cut at
   ``--fit-share`` of their count: fit window = the first 60%, evaluation window = the rest. By
   count, not wall time: the flywheel's traffic comes in rounds with training pauses between.
   Shadow answers still without a verdict are verified first.
2. Fit window -> ``ours``: the outcomes the RL loop's refit reads, of the local weights served
   at the end of the window only (``--all-weights``: every version's), fitted by
   ``router.learned.fit`` (the production code, calibration hold-out included). The production
   operating point is the threshold ``router.learned.LearnedPolicy`` derives at quality_target
   0.95. Fit window -> the family oracle: each family's local accept rate over the same local
   outcomes, Beta(1, 1)-smoothed, by the client's labels.
3. Evaluation items: every evaluation-window request with a recorded local verdict, locally
   served ones with the frontier's expected verdict and cost, frontier-served ones with a
   verified local shadow answer (``paired``) weighted by the inverse of their shadow probability
   (Horvitz-Thompson). ``--paired-only`` keeps only paired items, i.e. the frontier-served part
   of the traffic, which lacks the families the production router has learned to send local;
   hence not the default.
4. Policies, curves, APGR, targets: :mod:`~loadtests.bench.routing.report`. AUC (weighted):
   ours' ``p_local`` against the items' local verdicts (also the oracle's family rates: the best
   a family-level ranking does).
5. Decision cost: :func:`~loadtests.bench.routing.scorer.bench_scorer` (one caller, the typical
   IDE request); the fitted scorer on that request from 16 concurrent tasks on one event loop, as
   the gateway runs it (``policy.decide`` is synchronous on the loop): per call, and queued
   (what 16 simultaneous requests add to the loop, reported, not judged against the per-call
   target); and the fitted scorer on the evaluation items' own texts.

Caveats (the local weights change between rounds; skipped shadow calls): ``docs/routing.md``.
Output in ``--out`` (default: the run directory): tables, ``bench-routing.png`` and ``.json``;
the last line of stdout is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from loadtests.bench.routing import report as rr
from loadtests.bench.routing.items import (
    UNLABELLED,
    BenchError,
    FrontierPrior,
    RunInputs,
    eval_items,
    family_rates,
    log,
    outcomes_of,
    read_inputs,
    read_rows,
    served_weights_only,
    verify_missing,
)
from loadtests.bench.routing.scorer import bench_request, bench_scorer
from rl_loop.outcomes import RecordedOutcome
from router.config import RoutingConfig
from router.learned import LearnedPolicy, LearnedState, Outcome, fit
from router.policy import RulePolicy
from router.request_text import RequestText
from router.scorer import Scorer

REPO = Path(__file__).resolve().parents[3]
FIT_SHARE = 0.6
CONCURRENCY = 16
SCORER_CALLS = 5000


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


# ---------------------------------------------------------------- ours


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
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.bench.routing", description=__doc__.split("\n", 1)[0]
    )
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
