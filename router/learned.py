"""Learned routing: a request class moves to the local model once it answers it well enough.

Definitions
- Class of a request: the values of the tags named in ``class_tags`` (e.g. ``family``), joined
  with ``|``; a request without those tags is class ``*``. Whether it carries tools is part of
  the class (``tools`` suffix), since tool use is a distinct skill.
- Outcomes: an answer with a verdict (accepted / rejected) from user feedback on live traffic, or
  from verifying a shadow answer (the local model answering a frontier-served request off the
  user's path). Each outcome counts for one arm, ``local`` or ``frontier``, of its class.
- Estimate: per class and arm, Beta(1 + accepted, 1 + rejected). ``p_local`` is its mean;
  the decision uses the lower bound ``mean - z * sd`` so a handful of lucky answers is not enough.
Decision for an ``auto`` request of class c (pinned aliases and matching rules keep priority)
1. ``n_local(c) >= min_samples`` and ``lower(p_local) >= quality_target * mean(p_frontier)``
   -> local. ``quality_target`` is the ops-given ratio (0.95: local must keep 95% of the
   frontier's acceptance). A class never served by the frontier compares with ``frontier_prior``.
2. Otherwise frontier, except ``exploration_share`` of the class's requests (a stable hash of the
   request id, so a retried request lands the same way) go local to keep learning on live
   traffic.
Every decision names the policy version, the class and the estimate in its reason.
Pure: fitting is a function of outcomes; the gateway loads the fitted state from a file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from router.config import LearnedConfig
from router.decision import RouteDecision
from router.features import RequestFeatures, unit_hash
from router.policy import RulePolicy

Arm = Literal["local", "frontier"]


@dataclass(slots=True)
class ArmCounts:
    accepted: float = 0.0
    rejected: float = 0.0

    @property
    def n(self) -> float:
        return self.accepted + self.rejected

    def mean(self) -> float:
        return (1 + self.accepted) / (2 + self.n)

    def lower(self, z: float) -> float:
        a, b = 1 + self.accepted, 1 + self.rejected
        var = a * b / ((a + b) ** 2 * (a + b + 1))
        return self.mean() - z * math.sqrt(var)


@dataclass(frozen=True, slots=True)
class Outcome:
    class_key: str
    arm: Arm
    accepted: bool
    weight: float = 1.0


@dataclass(slots=True)
class LearnedState:
    """The fitted estimate; ``version`` is recorded with every decision it makes."""

    version: str
    classes: dict[str, dict[str, ArmCounts]] = field(default_factory=dict)

    def counts(self, class_key: str, arm: Arm) -> ArmCounts:
        return self.classes.get(class_key, {}).get(arm, ArmCounts())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "classes": {
                c: {a: [v.accepted, v.rejected] for a, v in arms.items()}
                for c, arms in self.classes.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LearnedState:
        return cls(
            str(data["version"]),
            {
                c: {a: ArmCounts(float(v[0]), float(v[1])) for a, v in arms.items()}
                for c, arms in data.get("classes", {}).items()
            },
        )


def class_key(features: RequestFeatures, class_tags: list[str]) -> str:
    values = [features.tags[t] for t in class_tags if t in features.tags]
    key = "|".join(values) if values else "*"
    return key + ("|tools" if features.has_tools else "")


def fit(outcomes: Iterable[Outcome], version: str) -> LearnedState:
    """Counts per class and arm from verdicts (a refit starts from scratch each time)."""
    state = LearnedState(version)
    for o in outcomes:
        arms = state.classes.setdefault(o.class_key, {})
        counts = arms.setdefault(o.arm, ArmCounts())
        if o.accepted:
            counts.accepted += o.weight
        else:
            counts.rejected += o.weight
    return state


class LearnedPolicy:
    """Rules first (pinned aliases, matching rules); ``auto`` traffic by the learned estimate."""

    def __init__(self, rules: RulePolicy, config: LearnedConfig, state: LearnedState) -> None:
        self._rules = rules
        self._config = config
        self._state = state
        self._version = f"{rules.version}+{state.version}"

    @property
    def version(self) -> str:
        return self._version

    @property
    def state(self) -> LearnedState:
        return self._state

    def model_names(self) -> list[str]:
        return self._rules.model_names()

    def predict_local_accept(self, features: RequestFeatures) -> float:
        """Estimated probability that the local model's answer is accepted."""
        return self._state.counts(class_key(features, self._config.class_tags), "local").mean()

    def local_is_good_enough(self, key: str) -> tuple[bool, str]:
        cfg = self._config
        local = self._state.counts(key, "local")
        frontier = self._state.counts(key, "frontier")
        p_front = frontier.mean() if frontier.n else cfg.frontier_prior
        lower = local.lower(cfg.z)
        ok = local.n >= cfg.min_samples and lower >= cfg.quality_target * p_front
        return ok, f"class={key} p_local_lb={lower:.3f} p_frontier={p_front:.3f} n={local.n:.0f}"

    def decide(self, features: RequestFeatures) -> RouteDecision:
        base = self._rules.decide(features)
        if base.reason != "default":
            return RouteDecision(base.targets, base.reason, self._version)
        cfg = self._config
        key = class_key(features, cfg.class_tags)
        ok, why = self.local_is_good_enough(key)
        if ok:
            return self._decision(cfg.local_target, f"learned:local {why}")
        explore = unit_hash(features.request_id or "", "explore") < cfg.exploration_share
        if explore:
            return self._decision(cfg.local_target, f"learned:explore {why}")
        return self._decision(cfg.frontier_target, f"learned:frontier {why}")

    def _decision(self, target: str, reason: str) -> RouteDecision:
        chain = self._rules.chain(target)
        return RouteDecision(chain, reason, self._version)
