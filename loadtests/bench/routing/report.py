"""Figures of ``make bench-routing`` (``loadtests/bench/routing/run.py``): cost/quality curves of
routing policies on evaluation items, RouteLLM's APGR, the targets, the table and the PNG.

Definitions (evaluation items: recorded requests with a real local verdict, each with both
arms' verdicts and costs for that request and a weight; which items, which verdicts are
estimated and why the weights: ``loadtests/bench/routing/items.py``)
- A policy routes each item to one arm. Its quality is the weighted accept rate of the routed
  mix (each item judged by the chosen arm's verdict), its cost the weighted mean cost of the
  chosen arms (USD per request; reported per 1k requests), its local share the weighted share
  of items sent local. With unit weights these are plain means.
- Ranked policies send items local in the order of a key, highest first, and sweep the cut from
  nothing local to everything local: ``ours`` by the fitted scorer's ``p_local``, the family
  oracle by its family's local accept rate measured on the fit window (one cut per family;
  equal keys go together). Between two cuts the curve is linear, which is the policy that sends
  that fraction of the boundary group local at random. ``random`` sends each item local with
  probability q: its curve is the straight line between the two fixed policies, exactly (the
  expectation, not one draw).
- PGR(s) = (quality(s) - quality(always-local)) / (quality(always-frontier) - quality(always-
  local)): 0 at always-local, 1 at always-frontier (above 1 where the mix beats the frontier).
- APGR (RouteLLM, Ong et al. 2024): the area under PGR over the share of calls to the strong
  model, x = 1 - local share, from 0 to 1; computed exactly for the piecewise-linear curve,
  not from sampled points. random's APGR is 0.5.
- CPT(p) (RouteLLM's "call-performance threshold"): the smallest frontier-call share x whose PGR
  reaches p (p = 0.5, 0.8); also given as the cost at that point over always-frontier's cost.
- Operating point at the quality target: the largest local share whose quality is at least
  ``QUALITY_TARGET`` x always-frontier's quality (the "95% quality" comparisons).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

QUALITY_TARGET = 0.95  # of always-frontier's accept rate
PGR_LEVELS = (0.5, 0.8)
SHARES = (0.25, 0.5, 0.75)  # local shares at which every swept policy's quality is printed
TARGET_AUC = 0.90
TARGET_APGR_VS_ORACLE = 0.9
TARGET_SHARE_VS_ORACLE = 0.9
TARGET_DECISION_P99_US = 200.0

ALWAYS_FRONTIER, ALWAYS_LOCAL, RANDOM, ORACLE, OURS = (
    "always-frontier",
    "always-local",
    "random",
    "family-oracle",
    "ours",
)
OURS_PRODUCTION = "ours@production"


@dataclass(frozen=True, slots=True)
class EvalItem:
    """One request: both arms' verdicts and costs, its family (the benchmark's label, never
    shown to ``ours``), ours' score, its weight. ``frontier_accepted`` is the recorded verdict
    (0 / 1) when the frontier answered it, else an expected rate; ``paired``: both verdicts are
    recorded ones."""

    inference_id: str
    family: str
    frontier_accepted: float
    local_accepted: bool
    frontier_cost: float
    local_cost: float
    p_local: float
    weight: float = 1.0
    paired: bool = True


@dataclass(frozen=True, slots=True)
class Curve:
    """Vertices of a swept policy, local share increasing from 0 to 1."""

    name: str
    local_share: FloatArray
    quality: FloatArray
    cost: FloatArray

    def at(self, share: float) -> tuple[float, float]:
        """(quality, cost per request) at ``share``, linear between vertices."""
        return (
            float(np.interp(share, self.local_share, self.quality)),
            float(np.interp(share, self.local_share, self.cost)),
        )


@dataclass(frozen=True, slots=True)
class Arms:
    """Per-item verdicts and costs of both arms, pre-multiplied by the normalised weights (so
    sums are weighted means), and those weights."""

    local: FloatArray
    frontier: FloatArray
    local_cost: FloatArray
    frontier_cost: FloatArray
    weight: FloatArray

    @classmethod
    def of(cls, items: Sequence[EvalItem]) -> Arms:
        w = np.array([i.weight for i in items], dtype=np.float64)
        if len(w) == 0 or not np.all(w > 0):
            raise ValueError("evaluation needs at least one item and positive weights")
        w = w / w.sum()
        return cls(
            w * np.array([float(i.local_accepted) for i in items]),
            w * np.array([i.frontier_accepted for i in items], dtype=np.float64),
            w * np.array([i.local_cost for i in items], dtype=np.float64),
            w * np.array([i.frontier_cost for i in items], dtype=np.float64),
            w,
        )


def ranked_curve(name: str, items: Sequence[EvalItem], keys: Sequence[float]) -> Curve:
    """Items go local highest key first; one vertex per distinct key (module docstring)."""
    n = len(items)
    if len(keys) != n:
        raise ValueError("a curve needs one key per item")
    arms = Arms.of(items)
    key = np.asarray(keys, dtype=np.float64)
    order = np.argsort(-key, kind="stable")
    k = key[order]
    cuts = np.concatenate(([0], np.flatnonzero(k[1:] != k[:-1]) + 1, [n]))

    def split(local: FloatArray, frontier: FloatArray) -> FloatArray:
        local_sum = np.concatenate(([0.0], np.cumsum(local[order])))
        frontier_rest = float(frontier.sum()) - np.concatenate(([0.0], np.cumsum(frontier[order])))
        return np.asarray(local_sum[cuts] + frontier_rest[cuts], dtype=np.float64)

    share = np.concatenate(([0.0], np.cumsum(arms.weight[order])))[cuts]
    share[-1] = 1.0  # exactly, whatever the rounding of the sum
    return Curve(
        name,
        share,
        split(arms.local, arms.frontier),
        split(arms.local_cost, arms.frontier_cost),
    )


def random_curve(items: Sequence[EvalItem]) -> Curve:
    """Local with probability q: the exact expectation, linear from always-frontier to always-
    local."""
    arms = Arms.of(items)
    return Curve(
        RANDOM,
        np.array([0.0, 1.0]),
        np.array([arms.frontier.sum(), arms.local.sum()]),
        np.array([arms.frontier_cost.sum(), arms.local_cost.sum()]),
    )


def routed_point(items: Sequence[EvalItem], local: Sequence[bool]) -> dict[str, float]:
    """Quality, cost per 1k and local share of one fixed routing of the items."""
    arms = Arms.of(items)
    mask = np.asarray(local, dtype=bool)
    quality = np.where(mask, arms.local, arms.frontier).sum()
    cost = np.where(mask, arms.local_cost, arms.frontier_cost).sum()
    return {
        "accept_rate": float(quality),
        "cost_per_1k_usd": float(cost) * 1000,
        "local_share": float(arms.weight[mask].sum()),
    }


def weighted_auc(
    scores: Sequence[float], labels: Sequence[bool], weights: Sequence[float]
) -> float:
    """Area under the ROC curve with weighted items (ties count half): the weighted share of
    (accepted, rejected) pairs the scores order right; 0.5 when one class is missing. With unit
    weights it is ``router.scorer.auc``."""
    s = np.asarray(scores, dtype=np.float64)
    pos = np.asarray(labels, dtype=bool)
    w = np.asarray(weights, dtype=np.float64)
    w_pos, w_neg = float(w[pos].sum()), float(w[~pos].sum())
    if w_pos <= 0 or w_neg <= 0:
        return 0.5
    values, inverse = np.unique(s, return_inverse=True)
    neg_at = np.bincount(inverse, weights=np.where(pos, 0.0, w), minlength=len(values))
    neg_below = np.concatenate(([0.0], np.cumsum(neg_at)[:-1]))
    credit = neg_below[inverse] + neg_at[inverse] / 2.0  # rejected mass scored below, ties half
    return float((w * credit)[pos].sum() / (w_pos * w_neg))


def pgr_of(quality: float | FloatArray, q_local: float, q_frontier: float) -> FloatArray | None:
    """PGR of a quality (or an array of them); None when both fixed policies are equal."""
    gap = q_frontier - q_local
    if abs(gap) < 1e-12:
        return None
    return np.asarray((np.asarray(quality, dtype=np.float64) - q_local) / gap, dtype=np.float64)


def apgr(curve: Curve, q_local: float, q_frontier: float) -> float | None:
    """Area under PGR over the frontier-call share (exact for the linear pieces)."""
    pgr = pgr_of(curve.quality, q_local, q_frontier)
    if pgr is None:
        return None
    x = 1.0 - curve.local_share
    return float(np.sum((x[:-1] - x[1:]) * (pgr[:-1] + pgr[1:]) / 2.0))


def frontier_share_for_pgr(
    curve: Curve, q_local: float, q_frontier: float, level: float
) -> float | None:
    """CPT(level): the smallest frontier-call share whose PGR reaches ``level``."""
    pgr = pgr_of(curve.quality, q_local, q_frontier)
    if pgr is None:
        return None
    x, y = (1.0 - curve.local_share)[::-1], pgr[::-1]  # frontier share increasing
    for j in range(len(x)):
        if y[j] >= level - 1e-12:
            if j == 0:
                return float(x[0])
            t = (level - y[j - 1]) / (y[j] - y[j - 1])
            return float(x[j - 1] + t * (x[j] - x[j - 1]))
    return None


def max_local_share(curve: Curve, floor: float) -> float:
    """The largest local share whose quality is at least ``floor``; 0 when none is."""
    s, q = curve.local_share, curve.quality
    if q[-1] >= floor - 1e-12:
        return float(s[-1])
    for j in range(len(s) - 2, -1, -1):
        if q[j] >= floor - 1e-12:
            t = (q[j] - floor) / (q[j] - q[j + 1])
            return float(s[j] + t * (s[j + 1] - s[j]))
    return 0.0


def curve_figures(curve: Curve, items: Sequence[EvalItem]) -> dict[str, Any]:
    """A swept policy's row: its operating point at the quality target, APGR and CPTs."""
    arms = Arms.of(items)
    q_local, q_frontier = float(arms.local.sum()), float(arms.frontier.sum())
    cost_frontier = float(arms.frontier_cost.sum())
    share = max_local_share(curve, QUALITY_TARGET * q_frontier)
    quality, cost = curve.at(share)
    out: dict[str, Any] = {
        "accept_rate": round(quality, 4),
        "cost_per_1k_usd": round(cost * 1000, 4),
        "local_share": round(share, 4),
        "apgr": _round(apgr(curve, q_local, q_frontier)),
    }
    for level in PGR_LEVELS:
        x = frontier_share_for_pgr(curve, q_local, q_frontier, level)
        tag = f"{round(level * 100)}"
        out[f"frontier_share_for_pgr{tag}"] = _round(x)
        if x is None or cost_frontier <= 0:
            out[f"cost_share_for_pgr{tag}"] = None
        else:
            out[f"cost_share_for_pgr{tag}"] = round(curve.at(1.0 - x)[1] / cost_frontier, 4)
    out["accept_at_local_share"] = {f"{s:g}": round(curve.at(s)[0], 4) for s in SHARES}
    return out


def fixed_figures(point: Mapping[str, float], items: Sequence[EvalItem]) -> dict[str, Any]:
    """A fixed policy's row: its own point, its PGR, whether it keeps the quality target."""
    arms = Arms.of(items)
    q_local, q_frontier = float(arms.local.sum()), float(arms.frontier.sum())
    pgr = pgr_of(point["accept_rate"], q_local, q_frontier)
    return {
        **{k: round(v, 4) for k, v in point.items()},
        "pgr": None if pgr is None else round(float(pgr), 4),
        "meets_quality_target": point["accept_rate"] >= QUALITY_TARGET * q_frontier - 1e-9,
    }


def targets(
    policies: Mapping[str, Mapping[str, Any]],
    auc_ours: float,
    decision_p99_us: Mapping[str, float],
) -> dict[str, Any]:
    """The issue's targets: met / missed with the figures that decide them."""
    ours, oracle = policies[OURS], policies[ORACLE]
    a_ours, a_oracle = ours["apgr"], oracle["apgr"]
    s_ours, s_oracle = ours["local_share"], oracle["local_share"]
    share_ratio = None if s_oracle <= 0 else round(s_ours / s_oracle, 4)
    apgr_ratio = None if not a_oracle or a_ours is None else round(a_ours / a_oracle, 4)
    out: dict[str, Any] = {
        "auc": {"value": round(auc_ours, 4), "target": TARGET_AUC, "met": auc_ours >= TARGET_AUC},
        "apgr_vs_oracle": {
            "ours": a_ours,
            "oracle": a_oracle,
            "ratio": apgr_ratio,
            "target": TARGET_APGR_VS_ORACLE,
            "met": a_ours is not None
            and a_oracle is not None
            and a_ours >= TARGET_APGR_VS_ORACLE * a_oracle,
        },
        "local_share_at_quality_target_vs_oracle": {
            "quality_target": QUALITY_TARGET,
            "ours": s_ours,
            "oracle": s_oracle,
            "ratio": share_ratio,
            "target": TARGET_SHARE_VS_ORACLE,
            "met": s_ours >= TARGET_SHARE_VS_ORACLE * s_oracle - 1e-9,
        },
        "stretch_beat_oracle_apgr": {
            "ours": a_ours,
            "oracle": a_oracle,
            "met": a_ours is not None and a_oracle is not None and a_ours > a_oracle,
        },
    }
    for name, p99 in decision_p99_us.items():
        out[f"decision_p99_us_{name}"] = {
            "value": p99,
            "target": TARGET_DECISION_P99_US,
            "met": p99 <= TARGET_DECISION_P99_US,
        }
    return out


def format_table(policies: Mapping[str, Mapping[str, Any]], auc_ours: float) -> str:
    """One row per policy; swept policies at their operating point of the quality target."""
    head = (
        f"{'policy':<17}{'accept':>8}{'$/1k':>9}{'local':>7}{'AUC':>7}{'APGR':>7}"
        f"{'CPT50':>7}{'CPT80':>7}{'cost50':>7}{'cost80':>7}"
    )
    lines = [head, "-" * len(head)]
    for name, row in policies.items():
        value = auc_ours if name == OURS_PRODUCTION else row.get("auc")
        auc = "-" if value is None else f"{value:.3f}"
        lines.append(
            f"{name:<17}{row['accept_rate']:>8.3f}{row['cost_per_1k_usd']:>9.3f}"
            f"{row['local_share']:>7.3f}{auc:>7}{_cell(row.get('apgr', row.get('pgr')))}"
            f"{_cell(row.get('frontier_share_for_pgr50'))}{_cell(row.get('frontier_share_for_pgr80'))}"
            f"{_cell(row.get('cost_share_for_pgr50'))}{_cell(row.get('cost_share_for_pgr80'))}"
        )
    lines.append(
        f"swept policies at the largest local share keeping accept >= {QUALITY_TARGET:g} x "
        "always-frontier's; APGR over the frontier-call share (fixed policies: their PGR); "
        "CPT = frontier-call share, cost = cost share of always-frontier, to recover 50/80% "
        "of the gap"
    )
    return "\n".join(lines)


def family_figures(
    items: Sequence[EvalItem],
    rates: Mapping[str, Mapping[str, float]],
    requests: Mapping[str, int],
    threshold: float,
) -> dict[str, dict[str, Any]]:
    """Per family: evaluation-window requests and items (the coverage), both arms' accept
    rates, the oracle's key, ours' mean score and production local share."""
    by_family: dict[str, list[EvalItem]] = defaultdict(list)
    for item in items:
        by_family[item.family].append(item)
    out: dict[str, dict[str, Any]] = {}
    for family in sorted(set(requests) | set(by_family)):
        group = by_family.get(family, [])
        out[family] = {
            "eval_requests": requests.get(family, 0),
            "items": len(group),
            "paired": sum(i.paired for i in group),
            "weight": round(sum(i.weight for i in group), 1),
            "local_accept": _mean([i.local_accepted for i in group]),
            "frontier_accept": _mean([i.frontier_accepted for i in group]),
            "oracle_fit_rate": round(rates[family]["rate"], 4) if family in rates else None,
            "ours_mean_p_local": _mean([i.p_local for i in group]),
            "ours_production_local_share": _mean([i.p_local >= threshold for i in group]),
        }
    return out


def evaluate(
    items: Sequence[EvalItem], rates: Mapping[str, Mapping[str, float]], threshold: float
) -> tuple[dict[str, dict[str, Any]], list[Curve], dict[str, dict[str, float]], float]:
    """Every policy's row, the swept curves, the fixed points and ours' AUC. ``rates``: the
    oracle's family -> {"rate": fit-window local accept rate}; ``threshold``: ours' production
    threshold on ``p_local``."""
    unseen = 0.5  # a family the fit window never saw: the Beta(1, 1) prior's mean
    oracle_keys = [rates[i.family]["rate"] if i.family in rates else unseen for i in items]
    curves = [
        random_curve(items),
        ranked_curve(ORACLE, items, oracle_keys),
        ranked_curve(OURS, items, [i.p_local for i in items]),
    ]
    points = {
        ALWAYS_FRONTIER: routed_point(items, [False] * len(items)),
        ALWAYS_LOCAL: routed_point(items, [True] * len(items)),
        OURS_PRODUCTION: routed_point(items, [i.p_local >= threshold for i in items]),
    }
    policies: dict[str, dict[str, Any]] = {
        ALWAYS_FRONTIER: fixed_figures(points[ALWAYS_FRONTIER], items),
        ALWAYS_LOCAL: fixed_figures(points[ALWAYS_LOCAL], items),
    }
    for curve in curves:
        policies[curve.name] = curve_figures(curve, items)
    policies[OURS_PRODUCTION] = {
        **fixed_figures(points[OURS_PRODUCTION], items),
        "threshold": None if not np.isfinite(threshold) else round(threshold, 4),
    }
    labels = [i.local_accepted for i in items]
    weights = [i.weight for i in items]
    policies[ORACLE]["auc"] = round(weighted_auc(oracle_keys, labels, weights), 4)
    auc_ours = weighted_auc([i.p_local for i in items], labels, weights)
    policies[OURS]["auc"] = round(auc_ours, 4)
    return policies, curves, points, auc_ours


def format_report(report: Mapping[str, Any]) -> str:
    """The printed report: policies, accept at equal local shares, families, decision cost,
    targets."""
    policies = report["policies"]
    lines = [format_table(policies, report["auc_ours"]), "", "accept at equal local share:"]
    for name in (RANDOM, ORACLE, OURS):
        shares = policies[name]["accept_at_local_share"]
        lines.append(f"  {name:<15}" + "".join(f"  {s}: {q:.3f}" for s, q in shares.items()))
    lines += [
        "",
        "families (evaluation window): requests, items, paired items, items' weight, local / "
        "frontier accept (unweighted), oracle's fit-window rate, ours' mean p_local, "
        "ours@production local share",
    ]
    for name, f in report["families"].items():
        cells = [
            f["eval_requests"],
            f["items"],
            f["paired"],
            f["weight"],
            f["local_accept"],
            f["frontier_accept"],
            f["oracle_fit_rate"],
            f["ours_mean_p_local"],
            f["ours_production_local_share"],
        ]
        lines.append(f"  {name:<22}" + "".join(f"{'-' if c is None else c:>8}" for c in cells))
    one, many, own = (
        report["decision_cost"][k] for k in ("one_caller", "concurrent", "recorded_texts")
    )
    lines += [
        "",
        f"decision (featurize + score) p50/p99 us: one caller {one['predict_p50_us']}/"
        f"{one['predict_p99_us']}; {many['callers']} concurrent callers per call "
        f"{many['predict_p50_us']}/{many['predict_p99_us']}, queued behind the others "
        f"{many['queued_p50_us']}/{many['queued_p99_us']}; recorded texts "
        f"{own['predict_p50_us']}/{own['predict_p99_us']}",
        "targets:",
    ]
    for name, t in report["targets"].items():
        shown = {k: v for k, v in t.items() if k != "met"}
        lines.append(f"  {name}: {'met' if t['met'] else 'NOT MET'} {json.dumps(shown)}")
    lines.append(f"plot: {report['png']}")
    return "\n".join(lines)


def _mean(values: Sequence[float | bool]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def plot(
    curves: Sequence[Curve],
    points: Mapping[str, Mapping[str, float]],
    floor: float,
    path: Path,
) -> None:
    """Accept rate against local share and against cost per 1k, one line per swept policy,
    one marker per fixed policy, the quality floor dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5), dpi=100)
    for curve in curves:
        marker = "." if len(curve.local_share) < 60 else None
        left.plot(curve.local_share, curve.quality, label=curve.name, marker=marker)
        right.plot(curve.cost * 1000, curve.quality, label=curve.name, marker=marker)
    for name, p in points.items():
        left.plot([p["local_share"]], [p["accept_rate"]], "o", ms=8, label=name)
        right.plot([p["cost_per_1k_usd"]], [p["accept_rate"]], "o", ms=8, label=name)
    for ax, xlabel in ((left, "local share"), (right, "cost per 1k requests (USD)")):
        ax.axhline(floor, color="grey", ls="--", lw=1, label=f"{QUALITY_TARGET:g} x frontier")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("accept rate")
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle("Switchyard routing: accept rate vs local share and cost (evaluation window)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _cell(value: object) -> str:
    return f"{value:>7.3f}" if isinstance(value, float) else f"{'-':>7}"
