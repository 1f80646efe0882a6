"""Off-policy estimates of a candidate routing policy from logged decisions, with intervals.

Each logged decision (:class:`Logged`) says what was served (local or frontier), the logging
policy's probability of local (the record's ``decision_propensity``), the verdict, and the
candidate's probability of local for the same request. The candidate's value
``V = E[ pi(local|x) r(x, local) + pi(frontier|x) r(x, frontier) ]`` is estimated three ways:

- **IPS**: ``mean(w_i r_i)`` with ``w_i = m_i pi(a_i|x_i) / mu(a_i|x_i)``; unbiased where the
  logging policy gave every action the candidate takes a probability above 0.
- **SNIPS**: ``sum(w_i r_i) / sum(w_i)``; a little biased, much lower variance with large weights
  (Swaminathan and Joachims 2015). Interval by the delta method.
- **DR**: ``mean( sum_a pi(a|x_i) q(x_i, a) + w_i (r_i - q(x_i, a_i)) )`` with a reward model
  ``q`` (Dudik, Langford and Li 2011); unbiased if either the propensities or ``q`` are right.
  ``q`` must not be fitted on the rows it predicts: :func:`cross_fit` fits it on the other time
  folds. :func:`off_policy` uses :func:`score_rate_model`: the local reward by decile of the
  candidate's own score, fitted on served-local verdicts and on verified shadow answers (the
  local model's answers to frontier-served requests), never on the candidate's in-sample fit.

``m_i = 0`` for a row served local by other weights than the candidate's (``local_weights`` of
:func:`off_policy`; :attr:`Logged.other_weights`), else 1: the candidate's local action is its
weights', so that reward is evidence of nothing. Such a row is valued by ``q`` alone (its term
``pi q_local + (1 - pi) q_frontier``: not served frontier, its frontier side is ``q``'s as for
any local row), ``q`` is fitted without its reward, and it counts as a row without overlap.
Rows without overlap are valued by ``q`` alone, so the interval adds ``q``'s own standard error
on them (summed as if fully correlated: conservative), and on the others the share ``f`` of it
that the correction no longer removes (``f``: the share of the log's local evidence, by
``pi / mu``, from other weights). Intervals are normal (mean ± z · standard error of the
per-row terms; 95% by default). :attr:`Estimate.no_overlap` is the share of rows where the
candidate puts probability on an action the log never takes there (``mu = 0``, or local by
other weights): IPS cannot cover them; DR imputes them (:attr:`Estimate.imputed`). The same
estimator gives any per-request figure in place of the reward (cost per request, for cost per
1k). :func:`off_policy` puts them on the console's replay preview's items.

Written here rather than taken from a library: the maintained off-policy packages (Open Bandit
Pipeline) pin their own torch/scikit-learn and expect action-context matrices; these are a few
lines of numpy, tested against the formulas above on hand-computed rows and against a simulated
log whose true value is known (``tests/router/test_ope.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

import numpy as np

from router.errors import RoutingError
from router.policy import RoutingPolicy
from router.replay import Arm, ReplayItem

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: two-sided 95% intervals


@dataclass(frozen=True, slots=True)
class Logged:
    """One logged decision with its outcome (``reward``: e.g. 1 accepted, 0 rejected)."""

    served_local: bool
    mu_local: float  # the logging policy's probability of local (decision_propensity)
    reward: float
    pi_local: float  # the candidate's probability of local for this request
    q_local: float | None = None  # the reward model's prediction for local (DR only)
    q_frontier: float | None = None  # ... and for the frontier
    q_local_se: float | None = None  # the standard error of q_local (widens imputed rows)
    score: float | None = None  # the candidate's p_local for the request (reward model input)
    shadow_reward: float | None = None  # a verified shadow answer's verdict: local, off-path
    other_weights: bool = False  # served local by other weights than the candidate's (m_i = 0)


@dataclass(frozen=True, slots=True)
class Estimate:
    value: float
    low: float
    high: float
    n: int
    no_overlap: float  # share of rows where the candidate takes an action mu never takes
    imputed: float  # share of rows DR valued by the reward model alone (the same rows)

    def covers(self, x: float) -> bool:
        return self.low <= x <= self.high

    def predict(self, n: int, z: float = Z95) -> tuple[float, float]:
        """The interval for the mean reward of ``n`` new requests (a 0/1 reward: the accept
        rate a window of ``n`` will show): the estimate's own standard error (its interval
        read back at ``z``) and the window's binomial one, added in quadrature, clipped to
        [0, 1]. The estimate's interval is for the policy's expected rate; a finite window
        scatters around that, so this is the interval to hold a window's figure against."""
        p = min(max(self.value, 0.0), 1.0)
        se = (self.high - self.low) / (2 * z)
        spread = z * math.sqrt(se * se + p * (1 - p) / max(n, 1))
        return max(0.0, self.value - spread), min(1.0, self.value + spread)


def _weights(rows: Sequence[Logged]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Importance weights, rewards and the no-overlap mask (row by row); a row served local by
    other weights has weight 0 and no overlap where the candidate may go local."""
    served = np.array([r.served_local for r in rows], dtype=bool)
    other = np.array([r.other_weights and r.served_local for r in rows], dtype=bool)
    mu = np.array([r.mu_local for r in rows], dtype=float)
    pi = np.array([r.pi_local for r in rows], dtype=float)
    reward = np.array([r.reward for r in rows], dtype=float)
    mu_a = np.where(served, mu, 1.0 - mu)
    pi_a = np.where(served, pi, 1.0 - pi)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where((mu_a > 0) & ~other, pi_a / mu_a, 0.0)
    no_overlap = ((pi > 0) & ((mu <= 0) | other)) | ((pi < 1) & (mu >= 1))
    return w, reward, no_overlap


def _interval(terms: np.ndarray, z: float) -> tuple[float, float, float]:
    n = len(terms)
    value = float(terms.mean())
    se = float(terms.std(ddof=1)) / math.sqrt(n) if n > 1 else math.inf
    return value, value - z * se, value + z * se


def ips(rows: Sequence[Logged], z: float = Z95) -> Estimate:
    """Inverse propensity scoring (module docstring)."""
    w, reward, gap = _weights(rows)
    value, low, high = _interval(w * reward, z)
    return Estimate(value, low, high, len(rows), float(gap.mean()), 0.0)


def snips(rows: Sequence[Logged], z: float = Z95) -> Estimate:
    """Self-normalised IPS; its standard error by the delta method."""
    w, reward, gap = _weights(rows)
    n, total = len(rows), float(w.sum())
    if total <= 0:
        return Estimate(math.nan, -math.inf, math.inf, n, float(gap.mean()), 0.0)
    value = float((w * reward).sum()) / total
    mean_w = total / n
    var = float(np.mean((w * (reward - value)) ** 2)) / mean_w**2
    se = math.sqrt(var / n) if n > 1 else math.inf
    return Estimate(value, value - z * se, value + z * se, n, float(gap.mean()), 0.0)


def doubly_robust(rows: Sequence[Logged], z: float = Z95) -> Estimate:
    """Doubly robust (module docstring); every row needs ``q_local`` and ``q_frontier``."""
    w, reward, gap = _weights(rows)
    q_local = np.array([_q(r.q_local) for r in rows])
    q_frontier = np.array([_q(r.q_frontier) for r in rows])
    served = np.array([r.served_local for r in rows], dtype=bool)
    pi = np.array([r.pi_local for r in rows], dtype=float)
    direct = pi * q_local + (1.0 - pi) * q_frontier
    q_served = np.where(served, q_local, q_frontier)
    terms = direct + w * (reward - q_served)
    value, low, high = _interval(terms, z)
    # Rows without overlap are valued by q alone; the row terms' spread does not see q's own
    # error, so it is added, summed as if fully correlated (conservative), where the model
    # gives it: se(mean) grows by sum_i pi_i q_se_i u_i / n, u_i = 1 without overlap, else
    # the share f of the log's local evidence (by pi / mu) from other weights: the share of
    # q's local error that the importance-weighted correction no longer removes.
    q_se = np.array([r.q_local_se or 0.0 for r in rows])
    other = np.array([r.other_weights and r.served_local for r in rows], dtype=bool)
    mu = np.array([r.mu_local for r in rows], dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mass = np.where(served & (mu > 0), pi / mu, 0.0)
    f = float(mass[other].sum() / mass.sum()) if mass.sum() > 0 else 0.0
    extra = float((pi * q_se * np.where(gap, 1.0, f)).sum()) / len(rows)
    if extra > 0:
        half = math.hypot((high - low) / 2, z * extra)
        low, high = value - half, value + half
    share = float(gap.mean())
    return Estimate(value, low, high, len(rows), share, share)


def _q(x: float | None) -> float:
    if x is None:
        raise ValueError("doubly robust needs the reward model's q_local and q_frontier")
    return x


# A fitted reward model answers (q_local, q_frontier), optionally with q_local's standard error.
Model = Callable[[Sequence[Logged]], Callable[[Logged], tuple[float, ...]]]


def cross_fit(rows: Sequence[Logged], folds: int, fit: Model) -> list[Logged]:
    """``rows`` (in time order) with ``q_local``/``q_frontier`` from a model fitted on the other
    ``folds - 1`` contiguous time folds: no row is predicted by a model that saw it."""
    if folds < 2:
        raise ValueError("cross-fitting needs at least 2 folds")
    n = len(rows)
    bounds = [round(i * n / folds) for i in range(folds + 1)]
    out: list[Logged] = []
    for lo, hi in pairwise(bounds):
        predict = fit([*rows[:lo], *rows[hi:]])
        for r in rows[lo:hi]:
            q = predict(r)
            se = q[2] if len(q) > 2 else None
            out.append(replace(r, q_local=q[0], q_frontier=q[1], q_local_se=se))
    return out


def mean_rate_model(prior: float = 0.5, strength: float = 2.0) -> Model:
    """The simplest reward model: each action's smoothed mean reward over the rows fitted
    (a Beta(prior · strength, (1 - prior) · strength) prior); a caller with request classes or
    scores passes a richer one."""

    def fit(train: Sequence[Logged]) -> Callable[[Logged], tuple[float, ...]]:
        means = []
        for local in (True, False):
            got = [r.reward for r in train if r.served_local == local and not r.other_weights]
            means.append((sum(got) + prior * strength) / (len(got) + strength))
        q_local, q_frontier = means
        return lambda _row: (q_local, q_frontier)

    return fit


def score_rate_model(bins: int = 10, strength: float = 1.0) -> Model:
    """A reward model that reads the request: the local reward by decile of the candidate's
    score (``Logged.score``), fitted on the local rewards of the rows (served local, and the
    shadow answers' verdicts: the local model's answer to a frontier-served request, judged off
    the user's path), each decile smoothed toward the overall local mean with ``strength``
    pseudo-rows; the frontier's reward one smoothed mean. Rows without a score take the overall
    local mean. The reward model may be anything fitted off the rows it predicts: shadows
    inform it without entering the importance-weighted term, whose propensities they lack.
    A row served local by other weights (``other_weights``) gives no local reward."""

    def fit(train: Sequence[Logged]) -> Callable[[Logged], tuple[float, ...]]:
        sums, counts = np.zeros(bins), np.zeros(bins)
        local_seen: list[float] = []
        frontier_seen = [r.reward for r in train if not r.served_local]
        for r in train:
            got = r.reward if r.served_local and not r.other_weights else r.shadow_reward
            if got is None:
                continue
            local_seen.append(got)
            if r.score is not None:
                b = min(int(r.score * bins), bins - 1)
                sums[b] += got
                counts[b] += 1
        q_local_all = (sum(local_seen) + 1.0) / (len(local_seen) + 2.0)
        q_frontier = (sum(frontier_seen) + 1.0) / (len(frontier_seen) + 2.0)
        local = (sums + strength * q_local_all) / (counts + strength)
        se = np.sqrt(local * (1 - local) / (counts + strength))
        se_all = math.sqrt(q_local_all * (1 - q_local_all) / (len(local_seen) + 2.0))

        def predict(row: Logged) -> tuple[float, ...]:
            if row.score is None:
                return q_local_all, q_frontier, se_all
            b = min(int(row.score * bins), bins - 1)
            return float(local[b]), q_frontier, float(se[b])

        return predict

    return fit


MIN_ROWS = 20  # fewer judged rows with a propensity: no estimate (its interval says nothing)


@dataclass(frozen=True, slots=True)
class OffPolicy:
    """What the logged propensities say of a candidate on replayed traffic (the console's
    replay preview shows it beside the replay's own figures)."""

    accept: Estimate | None  # DR, cross-fitted; None below MIN_ROWS
    # the accept a window as large as the one replayed (``rows`` judged requests) would show
    accept_window: tuple[float, float] | None
    cost_per_1k: Estimate | None  # SNIPS of the cost per request, times 1000
    local_share: float  # exact: the candidate's mean probability of local
    rows: int  # judged rows with a logged propensity
    without_propensity: int  # judged rows logged before the decision record (or rules only)
    replay_imputed: float  # share of the replay's accept figures it had to impute


def off_policy(
    policy: RoutingPolicy,
    items: Sequence[ReplayItem],
    arm_of: Callable[[str], Arm],
    folds: int = 5,
    local_weights: str | None = None,
) -> OffPolicy:
    """Estimates for ``policy`` on ``items`` (oldest first) from their logged propensities;
    given ``local_weights`` (the weights the candidate's local answers will come from), only
    their local verdicts count: a row served local by others (``served_weights``, unknown
    included) has ``m_i = 0`` (module docstring), a shadow of others is left out."""
    judged: list[Logged] = []
    costs: list[Logged] = []
    shares: list[float] = []
    without = imputed = decided = 0
    for item in items:
        try:
            decision = policy.decide(item.features)
            arm = arm_of(decision.target)
        except RoutingError:
            continue
        decided += 1
        local = arm == "local"
        if local != (item.served_arm == "local") and not (
            local and item.shadow_accepted is not None
        ):
            imputed += 1
        p = decision.propensity if decision.propensity is not None else float(local)
        shares.append(p)
        mu = item.logged_local_p
        if mu is None:
            without += item.accepted is not None
            continue
        served_local = item.served_arm == "local"
        costs.append(Logged(served_local, mu, item.cost_usd, p))
        if item.accepted is not None:
            shadow = None if item.shadow_accepted is None else float(item.shadow_accepted)
            if local_weights is not None and item.shadow_weights != local_weights:
                shadow = None
            judged.append(
                Logged(
                    served_local,
                    mu,
                    float(item.accepted),
                    p,
                    score=decision.p_local,
                    shadow_reward=shadow,
                    other_weights=served_local and local_weights not in (None, item.served_weights),
                )
            )
    accept = cost = None
    if len(judged) >= MIN_ROWS:
        accept = doubly_robust(cross_fit(judged, folds, score_rate_model()))
    if len(costs) >= MIN_ROWS:
        c = snips(costs)
        cost = Estimate(1000 * c.value, 1000 * c.low, 1000 * c.high, c.n, c.no_overlap, 0.0)
    return OffPolicy(
        accept,
        None if accept is None else accept.predict(len(judged)),
        cost,
        sum(shares) / len(shares) if shares else 0.0,
        len(judged),
        without,
        imputed / decided if decided else 0.0,
    )
