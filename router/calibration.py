"""The learned policy's threshold: the largest local share whose routed mix, as bounded from
below on held-out verdicts weighted to the live mix, keeps the quality target.

Per segment (``plain`` requests and those offering ``tools``: an agent step is never sent
local on the evidence of chat requests, nor the reverse); measurements in docs/routing.md.
- Pool: held-out local verdicts ``(s_i, y_i, pi_i)``: the fitted scorer's ``p_local``, the
  verdict, the chance it was observed (sent local by score or a gate item: 1; by exploration:
  the exploration share; a shadow: its sampling probability). Base weight ``1 / pi_i``, trimmed
  at ``max_weight_ratio`` x the median (untrimmed, their variance cost most of the evidence).
- Live mix: the fitted scorer's scores of the latest live requests. Their ``bins`` quantiles
  cut the score axis; each verdict's weight is scaled by ``live share / pool weight share`` of
  its bin (an empty bin's live share goes to the nearest bin with verdicts). Without live
  scores the pool is its own mix. ``n_eff = (sum w)^2 / sum w^2`` (Kish) in every bound.
- Routed mix at a cut ``t``: share ``a(t)`` of the live mix (scores ``>= t``) answered locally
  at ``L(t)`` (weighted accept of the verdicts ``>= t``), the rest at the frontier's ``f`` less
  the exploration share ``e`` answered locally at ``B(t)`` (below ``t``):
  ``R(t) = a L + (1 - a) (f - e (f - B))``; exploration's expected loss is in the budget.
- Learn-then-test: cuts between distinct pool scores are tested from the highest down; a cut
  passes when ``R`` with ``L`` at its one-sided Wilson lower bound (level ``delta``) reaches
  the goal, ``q f`` (with ``quality_window`` ``N``: ``q f + z sqrt(f (1 - f) / N)``, so that a
  window of ``N`` requests keeps ``q f`` too, not only the expected accept); the first failure
  ends the scan (fixed-sequence testing keeps the whole scan's family-wise error at
  ``delta``; Angelopoulos et al. 2021). The threshold is the lowest passed
  cut whose marginal request is not below ``q f`` on its own (its block's point estimate in the
  non-increasing isotonic fit of ``y`` on the score). Fewer than ``min_samples`` verdicts or no
  cut passing: ``inf``.
- Exploration (:func:`exploration_share`): the configured share, capped so that its expected
  loss (the upper bound of ``f - B``) spends at most ``exploration_budget`` of ``f - goal``.
  Without ``min_samples`` verdicts: the share that stays in that budget were every explored
  answer rejected, where ``explore_unproven`` (chat), else none (agent steps: a failed step
  can spend the user's episode; shadows give their first evidence).

Why hand-written: the Wilson bound on a Kish effective size and the fixed-sequence scan are a
few lines each; statsmodels' ``proportion_confint`` takes integer counts only and no maintained
package does learn-then-test over a routed mix. ``tests/router/test_calibration.py`` checks them
against the reference formulas and published values.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from router.config import LearnedConfig

Segment = Literal["plain", "tools"]
SEGMENTS: tuple[Segment, ...] = ("plain", "tools")
LIVE_KEPT = 512  # live scores kept per segment in the state (evenly spaced order statistics)


def segment_of(has_tools: bool) -> Segment:
    return "tools" if has_tools else "plain"


def wilson_bounds(p: float, n: float, z: float) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p`` observed on ``n`` (possibly fractional:
    an effective sample size) trials at normal quantile ``z``; ``(0, 1)`` when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n))
    scale = 1 + z * z / n
    return max(0.0, (centre - spread) / scale), min(1.0, (centre + spread) / scale)


def kish_n(weights: npt.NDArray[np.float64]) -> float:
    """Effective sample size ``(sum w)^2 / sum w^2`` (0 for no weight)."""
    sq = float((weights * weights).sum())
    return float(weights.sum()) ** 2 / sq if sq > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Knobs:
    """What a segment's threshold is computed with: the learned policy's config
    (``router.config.LearnedConfig``, where each default and its reason live)."""

    quality_target: float
    exploration_share: float
    min_samples: int
    delta: float
    bins: int
    max_weight_ratio: float
    exploration_budget: float
    explore_unproven: bool
    window: int | None = None

    @classmethod
    def of(cls, config: LearnedConfig, segment: Segment) -> Knobs:
        return cls(
            quality_target=config.quality_target,
            exploration_share=config.exploration_share,
            min_samples=config.min_samples,
            delta=config.calibration_delta,
            bins=config.live_mix_bins,
            max_weight_ratio=config.max_weight_ratio,
            exploration_budget=config.exploration_budget,
            explore_unproven=segment == "plain" or config.explore_unproven_tools,
            window=config.quality_window,
        )

    def goal(self, p_frontier: float) -> float:
        """The routed mix's accept to keep: ``q f``, raised by ``z sqrt(f (1 - f) / N)`` for a
        window of ``N`` requests (a window of the mix scatters about as one of frontier
        answers), never above ``f``."""
        goal = self.quality_target * p_frontier
        if self.window is not None:
            spread = math.sqrt(max(p_frontier * (1 - p_frontier), 0.0) / self.window)
            goal += self.z * spread
        return min(goal, p_frontier)

    @property
    def z(self) -> float:
        return NormalDist().inv_cdf(1 - self.delta)


@dataclass(slots=True)
class SegmentPool:
    """One segment's held-out verdicts and live scores (the state's stored form)."""

    scores: list[float] = field(default_factory=list)
    accepted: list[bool] = field(default_factory=list)
    propensity: list[float] = field(default_factory=list)
    live: list[float] = field(default_factory=list)

    def add(self, score: float, accepted: bool, propensity: float = 1.0) -> None:
        self.scores.append(score)
        self.accepted.append(accepted)
        self.propensity.append(propensity)

    def set_live(self, scores: Sequence[float]) -> None:
        """Keep at most ``LIVE_KEPT`` evenly spaced order statistics of ``scores``."""
        ordered = sorted(scores)
        if len(ordered) > LIVE_KEPT:
            picks = np.linspace(0, len(ordered) - 1, LIVE_KEPT).round().astype(int)
            ordered = [ordered[i] for i in picks.tolist()]
        self.live = ordered

    def weights(self, bins: int, max_ratio: float = math.inf) -> npt.NDArray[np.float64]:
        """Each verdict's weight: ``1 / propensity``, trimmed at ``max_ratio`` x the median,
        post-stratified to the live scores."""
        base = 1.0 / np.clip(np.asarray(self.propensity, dtype=np.float64), 1e-6, 1.0)
        if len(base):
            base = np.minimum(base, max_ratio * float(np.median(base)))
        if not self.live or not self.scores or bins < 2:
            return base
        edges = np.quantile(np.asarray(self.live), np.linspace(0, 1, bins + 1)[1:-1])
        live_bin = np.searchsorted(edges, np.asarray(self.live), side="right")
        pool_bin = np.searchsorted(edges, np.asarray(self.scores), side="right")
        live_share = np.bincount(live_bin, minlength=bins) / len(self.live)
        pool_mass = np.bincount(pool_bin, weights=base, minlength=bins)
        have = np.flatnonzero(pool_mass > 0)
        target = np.zeros(bins)
        for b in range(bins):  # an empty bin's live share goes to the nearest bin with verdicts
            target[have[np.argmin(np.abs(have - b))]] += live_share[b]
        scale = np.divide(target, pool_mass, out=np.zeros(bins), where=pool_mass > 0)
        weighted: npt.NDArray[np.float64] = base * scale[pool_bin] * len(self.scores)
        return weighted

    def to_json(self) -> dict[str, Any]:
        return {
            # exact: a threshold is one of these scores, and a request scoring the same must
            # clear it after a round trip (rounding 0.99982856 up to 0.999829 would not)
            "scores": self.scores,
            "accepted": self.accepted,
            "propensity": [round(p, 6) for p in self.propensity],
            "live": [round(s, 6) for s in self.live],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SegmentPool:
        scores = [float(s) for s in data.get("scores", [])]
        propensity = [float(p) for p in data.get("propensity", [1.0] * len(scores))]
        return cls(
            scores,
            [bool(a) for a in data.get("accepted", [])],
            propensity,
            [float(s) for s in data.get("live", [])],
        )


@dataclass(frozen=True, slots=True)
class SegmentPlan:
    """A segment's threshold, exploration share and the figures behind them."""

    threshold: float
    exploration_share: float
    samples: int
    n_eff: float
    local_share: float  # of the live mix, at the threshold
    routed_lower: float  # R's lower bound at the threshold (f when nothing goes local)


def plan(pool: SegmentPool, p_frontier: float, knobs: Knobs) -> SegmentPlan:
    """The segment's threshold and exploration share (module docstring)."""
    n = len(pool.scores)
    if n < knobs.min_samples:
        # no measured harm yet: bounded by the worst (every explored answer rejected)
        share = (
            exploration_share(knobs, p_frontier, 0.0, math.inf) if knobs.explore_unproven else 0.0
        )
        return SegmentPlan(math.inf, share, n, 0.0, 0.0, p_frontier - share * p_frontier)
    f, q, z, goal = p_frontier, knobs.quality_target, knobs.z, knobs.goal(p_frontier)
    order = np.argsort(-np.asarray(pool.scores), kind="stable")
    s = np.asarray(pool.scores)[order]
    y = np.asarray(pool.accepted, dtype=np.float64)[order]
    w = pool.weights(knobs.bins, knobs.max_weight_ratio)[order]
    # prefix sums with a leading 0: entry k covers the top k verdicts
    cw, cwy, cw2 = (np.concatenate(([0.0], np.cumsum(v))) for v in (w, w * y, w * w))
    total = (float(cw[n]), float(cwy[n]), float(cw2[n]))

    def explore(k: int) -> tuple[float, float]:
        """Exploration share and the acceptance ``B`` below a cut at ``k``."""
        rest = (total[0] - cw[k], total[1] - cwy[k], total[2] - cw2[k])
        below = rest[1] / rest[0] if rest[0] > 0 else 0.0
        rest_n = rest[0] * rest[0] / rest[2] if rest[2] > 0 else 0.0
        return exploration_share(knobs, f, below, rest_n), below

    marginal = _isotonic_blocks(s, y, w)
    eps0, below0 = explore(0)
    best = (math.inf, eps0, 0.0, f - eps0 * (f - below0))
    for k in range(1, n + 1):
        if k < n and s[k] == s[k - 1]:
            continue  # only cuts between distinct scores
        t = float(s[k - 1] + s[k]) / 2 if k < n else float(s[k - 1])
        a = _share_at(pool, t, float(cw[k]) / total[0])
        lower = wilson_bounds(float(cwy[k] / cw[k]), float(cw[k] ** 2 / cw2[k]), z)[0]
        eps, below = explore(k)
        routed = a * lower + (1 - a) * (f - eps * (f - below))
        if routed < goal - 1e-12:
            break  # fixed sequence: the first failure ends the scan
        if marginal[k - 1] >= q * f - 1e-12:
            best = (t, eps, a, routed)
    kish = total[0] * total[0] / total[2] if total[2] > 0 else 0.0
    return SegmentPlan(best[0], best[1], n, kish, best[2], best[3])


def exploration_share(knobs: Knobs, p_frontier: float, below: float, below_n: float) -> float:
    """The configured exploration share, capped so that exploration's expected loss (the
    upper bound of ``f - B``, ``B`` observed as ``below`` on ``below_n`` effective verdicts)
    spends at most ``exploration_budget`` of the quality budget ``f - goal``
    (:meth:`Knobs.goal`)."""
    if knobs.exploration_share == 0 or below_n <= 0:
        return knobs.exploration_share
    lower = below if math.isinf(below_n) else wilson_bounds(below, below_n, knobs.z)[0]
    harm = p_frontier - lower
    budget = knobs.exploration_budget * (p_frontier - knobs.goal(p_frontier))
    return knobs.exploration_share if harm <= 0 else min(knobs.exploration_share, budget / harm)


def _share_at(pool: SegmentPool, threshold: float, pool_share: float) -> float:
    """The live mix's share scoring ``>= threshold`` (the pool's weighted share without one)."""
    if not pool.live:
        return pool_share
    return 1.0 - bisect_left(pool.live, threshold) / len(pool.live)


def _isotonic_blocks(
    s: npt.NDArray[np.float64], y: npt.NDArray[np.float64], w: npt.NDArray[np.float64]
) -> list[float]:
    """Per verdict (sorted high to low score): the weighted mean of its block in the
    non-increasing isotonic fit of ``y`` along the score (pool-adjacent-violators; verdicts of
    equal score share a block)."""
    blocks: list[list[float]] = []  # [sum of w*y, sum of w, first score, count]
    for score, value, weight in zip(s.tolist(), y.tolist(), w.tolist(), strict=True):
        if blocks and blocks[-1][2] == score:
            blocks[-1][0] += weight * value
            blocks[-1][1] += weight
            blocks[-1][3] += 1
        else:
            blocks.append([weight * value, weight, score, 1])
        while len(blocks) > 1 and _mean(blocks[-2]) < _mean(blocks[-1]):
            last = blocks.pop()
            for i in (0, 1, 3):
                blocks[-1][i] += last[i]
    return [_mean(b) for b in blocks for _ in range(int(b[3]))]


def _mean(block: list[float]) -> float:
    return block[0] / block[1] if block[1] > 0 else 0.0
