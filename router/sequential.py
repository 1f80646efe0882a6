"""An anytime-valid test of a release: does the candidate arm lose accept rate against live?

A release assigns each request to the candidate arm with probability ``share`` (a hash of the
request id, independent of the request). Only the requests on which the arms decide differently
can tell them apart; ``delta`` is the candidate's accept rate on them minus live's.

``delta`` gets one confidence sequence that holds at every step at once with probability
``1 - alpha``, so the decision may look after every verdict without inflating its error. Each
verdict ``x`` (of arm ``c``: 1 candidate, 0 live) gives the augmented inverse-propensity term

    z = m_c - m_l + c (x - m_c) / s - (1 - c) (x - m_l) / (1 - s)

with ``m_c``, ``m_l`` the arms' running means *before* it (predictable) and ``s`` the share:
its conditional mean is ``delta`` exactly (the assignment is a coin of known bias), it lies in
``[-1 - 1/(1-s), 1 + 1/s]``, and its variance is about ``p(1-p) (1/s + 1/(1-s))``, the two
arms' own. The sequence, on ``z`` rescaled to [0, 1], is the predictable plug-in
empirical-Bernstein one (Waudby-Smith and Ramdas 2024, "Estimating means of bounded random
variables by betting", Theorem 2; it needs only a constant conditional mean)::

    lambda_t = min(sqrt(2 log(2/a) / (s2_{t-1} t log(1 + t))), 1/2)
    centre   = sum(lambda_i x_i) / sum(lambda_i)
    radius   = (log(2/a) + sum(v_i psi_E(lambda_i))) / sum(lambda_i)
    v_i = 4 (x_i - m_{i-1})^2,  psi_E(l) = (-log(1 - l) - l) / 4

with ``m`` and ``s2`` the running mean and variance (started at 1/2 and 1/4). Measured against
the difference of two per-arm sequences (each at ``alpha/2``, as this test first was): an A/A
release at accept 0.9 and share 0.3 is promoted after a median 662 differing verdicts instead
of 1,175, at 0.8 after 847 instead of 2,476; a candidate at 0.65 against 0.9 is rolled back
after 496 instead of 897.

The decision (:meth:`ReleaseTest.decide`): ``promote`` once the lower bound of ``delta`` is above
``-margin``; ``rollback`` once the upper bound is below ``-margin`` (it is worse), or when
``max_n`` differing verdicts passed without either (no evidence is not a pass: fail safe), or,
with a ``floor``, once the candidate's *local* answers in any segment (plain, tools) have an
accept rate whose upper bound (a per-arm sequence at ``alpha/2``) is under it: a candidate bad
on a slice of the traffic is caught on that slice's own answers; ``continue`` otherwise.

Written here, not taken from a library: ``confseq`` builds C++ extensions for many bounds; this
is twenty lines, tested for time-uniform coverage and by simulation (the test file above).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

Decision = Literal["promote", "rollback", "continue"]


LAMBDA_MAX = 0.5  # the bet's cap (the paper's c)


@dataclass(slots=True)
class MeanSequence:
    """A confidence sequence (module docstring) at level ``alpha`` for the mean of values in
    [0, 1] that share one conditional mean."""

    alpha: float
    n: int = 0
    total: float = 0.0
    _mean: float = 0.5  # m_{t-1}: the running mean, started at 1/2
    _var: float = 0.25  # s2_{t-1}: the running variance, started at 1/4
    _sum_sq: float = 0.0
    _lam: float = 0.0  # sum of lambda_i
    _lam_x: float = 0.0  # sum of lambda_i x_i
    _penalty: float = 0.0  # sum of v_i psi_E(lambda_i)

    def add_value(self, x: float) -> None:
        self.n += 1
        t = self.n
        log_term = math.log(2 / self.alpha)
        lam = min(math.sqrt(2 * log_term / (self._var * t * math.log(1 + t))), LAMBDA_MAX)
        self._penalty += 4 * (x - self._mean) ** 2 * (-math.log(1 - lam) - lam) / 4
        self._lam += lam
        self._lam_x += lam * x
        self.total += x
        self._mean = (0.5 + self.total) / (t + 1)
        self._sum_sq += (x - self._mean) ** 2
        self._var = (0.25 + self._sum_sq) / (t + 1)

    def interval(self) -> tuple[float, float]:
        if self.n == 0:
            return 0.0, 1.0
        centre = self._lam_x / self._lam
        half = (math.log(2 / self.alpha) + self._penalty) / self._lam
        return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(slots=True)
class Arm(MeanSequence):
    """One arm's verdicts, with their own sequence (the floors, the arm's figures)."""

    accepted: int = 0

    def add(self, accepted: bool) -> None:
        self.accepted += accepted
        self.add_value(1.0 if accepted else 0.0)


@dataclass(slots=True)
class ReleaseTest:
    """Verdicts in, a decision out (module docstring); ``share``: the candidate arm's."""

    share: float
    margin: float = 0.1
    alpha: float = 0.05
    max_n: int = 4000  # differing verdicts before a release without evidence is rolled back
    floor: float | None = None  # the least local accept a segment may show (module docstring)
    candidate: Arm = field(init=False)
    live: Arm = field(init=False)
    local: dict[str, Arm] = field(init=False)  # the candidate's local answers, per segment
    delta: MeanSequence = field(init=False)  # of z rescaled to [0, 1] (module docstring)

    def __post_init__(self) -> None:
        if not 0 < self.share < 1:
            raise ValueError("share must be strictly between 0 and 1")
        self.candidate, self.live = Arm(self.alpha / 2), Arm(self.alpha / 2)
        self.local = {}
        self.delta = MeanSequence(self.alpha)

    def _z_range(self) -> tuple[float, float]:
        return -1 - 1 / (1 - self.share), 1 + 1 / self.share

    @property
    def n(self) -> int:
        return self.candidate.n + self.live.n

    def add(self, candidate_served: bool, accepted: bool, local_segment: str | None = None) -> None:
        """One verdict on a request the arms decided differently; ``local_segment``: the
        segment of a local answer (None: answered at the frontier)."""
        m_c = (0.5 + self.candidate.accepted) / (self.candidate.n + 1)  # predictable means
        m_l = (0.5 + self.live.accepted) / (self.live.n + 1)
        x, s = float(accepted), self.share
        z = m_c - m_l + (x - m_c) / s if candidate_served else m_c - m_l - (x - m_l) / (1 - s)
        low, high = self._z_range()
        self.delta.add_value((z - low) / (high - low))
        (self.candidate if candidate_served else self.live).add(accepted)
        if candidate_served and local_segment is not None:
            self.local.setdefault(local_segment, Arm(self.alpha / 2)).add(accepted)

    def under_floor(self) -> str | None:
        """The first segment whose candidate local accept is surely under ``floor``, if any."""
        if self.floor is None:
            return None
        for segment, arm in sorted(self.local.items()):
            if arm.interval()[1] < self.floor:
                return segment
        return None

    def bounds(self) -> tuple[float, float]:
        """The anytime-valid interval of ``delta`` now (within [-1, 1])."""
        if self.delta.n == 0:
            return -1.0, 1.0
        low, high = self._z_range()
        lo, hi = self.delta.interval()
        return max(-1.0, low + lo * (high - low)), min(1.0, low + hi * (high - low))

    def decide(self) -> Decision:
        if self.under_floor() is not None:
            return "rollback"
        low, high = self.bounds()
        if low > -self.margin:
            return "promote"
        if high < -self.margin or self.n >= self.max_n:
            return "rollback"
        return "continue"
