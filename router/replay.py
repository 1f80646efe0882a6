"""Replay a routing policy on recorded traffic: what would it have done, and at what cost?

For each recorded request the candidate policy decides a target. Where it picks the arm
(local / frontier) that actually served the request, the recorded outcome, cost and latency are
used as they are. Where it picks the other arm, they are estimated:
- acceptance: the shadow answer's verdict when one was recorded (the local model answered that
  very request off the user's path), else the policy's own estimate for the request (the
  learned scorer's ``p_local``), else the mean acceptance of that arm for the request's class
  over the replayed traffic (Beta(1,1) prior), else 0.5;
- cost and latency: the mean of that arm for the class, else of the arm overall.
The report gives the predicted local share, accept rate, cost per 1k requests and latency p50,
overall and per class, so ops can compare a candidate with the current policy before applying it.
An item names the local weights behind its local verdicts (``served_weights``, ``shadow_weights``):
the replay reads every verdict as it is; ``router.ope`` can count only a chosen weights' ones.
Pure: the caller reads the records and passes them in.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from router.errors import RoutingError
from router.features import RequestFeatures
from router.policy import RoutingPolicy

Arm = Literal["local", "frontier"]


@dataclass(frozen=True, slots=True)
class ReplayItem:
    features: RequestFeatures
    served_arm: Arm
    accepted: bool | None
    cost_usd: float
    latency_ms: float
    shadow_accepted: bool | None = None
    class_key: str = "*"
    logged_local_p: float | None = None  # the recorded decision_propensity (router.ope)
    # The local weights behind the item's local evidence (router.ope counts only the candidate's):
    served_weights: str | None = None  # the weights_version that answered, when served local
    shadow_weights: str | None = None  # the weights_version of the shadow answer judged


@dataclass(slots=True)
class ArmReport:
    requests: int = 0
    local_share: float = 0.0
    accept_rate: float = 0.0
    cost_per_1k_usd: float = 0.0
    latency_p50_ms: float = 0.0


@dataclass(slots=True)
class ReplayReport:
    policy_version: str
    overall: ArmReport
    per_class: dict[str, ArmReport] = field(default_factory=dict)
    unroutable: int = 0


@dataclass(slots=True)
class _Means:
    accept: dict[tuple[str, Arm], list[float]] = field(default_factory=lambda: defaultdict(list))
    cost: dict[tuple[str, Arm], list[float]] = field(default_factory=lambda: defaultdict(list))
    latency: dict[tuple[str, Arm], list[float]] = field(default_factory=lambda: defaultdict(list))

    def add(self, item: ReplayItem) -> None:
        for key in ((item.class_key, item.served_arm), ("*all*", item.served_arm)):
            if item.accepted is not None:
                self.accept[key].append(1.0 if item.accepted else 0.0)
            self.cost[key].append(item.cost_usd)
            self.latency[key].append(item.latency_ms)
        if item.shadow_accepted is not None:
            for key in ((item.class_key, "local"), ("*all*", "local")):
                self.accept[key].append(1.0 if item.shadow_accepted else 0.0)

    def estimate(
        self, table: Mapping[tuple[str, Arm], list[float]], c: str, arm: Arm, default: float
    ) -> float:
        values = table.get((c, arm)) or table.get(("*all*", arm))
        return statistics.fmean(values) if values else default

    def p_accept(self, c: str, arm: Arm) -> float:
        values = self.accept.get((c, arm)) or self.accept.get(("*all*", arm))
        if not values:
            return 0.5
        return (1 + sum(values)) / (2 + len(values))


def _report(rows: Sequence[tuple[Arm, float, float, float]]) -> ArmReport:
    if not rows:
        return ArmReport()
    return ArmReport(
        requests=len(rows),
        local_share=sum(1 for r in rows if r[0] == "local") / len(rows),
        accept_rate=statistics.fmean(r[1] for r in rows),
        cost_per_1k_usd=1000 * statistics.fmean(r[2] for r in rows),
        latency_p50_ms=statistics.median(r[3] for r in rows),
    )


def replay(
    policy: RoutingPolicy, items: Iterable[ReplayItem], arm_of: Callable[[str], Arm]
) -> ReplayReport:
    """Predicted outcome of ``policy`` on ``items``; ``arm_of`` maps a target to its arm."""
    items = list(items)
    means = _Means()
    for item in items:
        means.add(item)
    rows: list[tuple[Arm, float, float, float]] = []
    by_class: dict[str, list[tuple[Arm, float, float, float]]] = defaultdict(list)
    unroutable = 0
    for item in items:
        try:
            decision = policy.decide(item.features)
            arm = arm_of(decision.target)
        except RoutingError:
            unroutable += 1
            continue
        c = item.class_key
        if arm == item.served_arm:
            acc = means.p_accept(c, arm) if item.accepted is None else float(item.accepted)
            row = (arm, acc, item.cost_usd, item.latency_ms)
        else:
            if arm == "local" and item.shadow_accepted is not None:
                acc = float(item.shadow_accepted)
            elif arm == "local" and decision.p_local is not None:
                acc = decision.p_local  # the scorer's estimate for this very request
            else:
                acc = means.p_accept(c, arm)
            row = (
                arm,
                acc,
                means.estimate(means.cost, c, arm, item.cost_usd),
                means.estimate(means.latency, c, arm, item.latency_ms),
            )
        rows.append(row)
        by_class[c].append(row)
    return ReplayReport(
        policy.version,
        _report(rows),
        {c: _report(r) for c, r in sorted(by_class.items())},
        unroutable,
    )
