"""Learned routing: a request goes to the local model when what it says predicts it will be
answered well enough there.

Definitions
- Outcome: an answer with a verdict (accepted / rejected) from user feedback on live traffic, or
  from verifying a shadow answer (the local model answering a frontier-served request off the
  user's path), or from the RL loop's gate. Each is for one arm, ``local`` or ``frontier``, and
  carries the request's :class:`~router.request_text.RequestText` (what the scorer reads) and an
  evidence group (``class_key``: ops tags or a benchmark's labels, ``*`` without; used for
  reports and for the RL loop's evidence bookkeeping, never by a decision).
- Scorer (:mod:`router.scorer`): ``p_local(request)``, the probability that the local model's
  answer is accepted, a logistic regression over hashed features of the request text, fitted on
  the local outcomes; ``p_frontier``, the frontier's smoothed acceptance.
- Calibration: a held-out share of the local outcomes (``calibration_share``, drawn by a
  stable hash of their position) is scored by the fitted scorer and kept as (score, verdict)
  pairs in the state. The threshold is derived from them when the policy is built, so changing
  ``quality_target`` needs no refit: the lowest threshold whose routed mix (scores >= t local
  at their measured acceptance, the rest at the frontier's) keeps at least ``quality_target`` x
  the frontier-only acceptance, and whose marginal request (the lowest-scoring one sent local)
  is not clearly below that share on its own (the upper 95% bound of its isotonic-calibrated
  acceptance reaches it): a mix-level target alone spends the allowed loss on requests the local
  model mostly fails, and a point estimate holds back a learnable family whose held-out verdicts
  are only noisily below (docs/routing.md, "How the scorer learns").
  Fewer than ``min_samples`` held-out verdicts: no threshold (nothing goes local by score).
Decision for an ``auto`` request (pinned aliases and matching rules keep priority; a rule that
matches request tags is how ops pin a tagged class to a target, and tags are never required)
1. ``p_local >= threshold`` -> local.
2. Otherwise frontier, except ``exploration_share`` of the requests (a stable hash of the request
   id, so a retried request lands the same way) go local to keep learning on live traffic.
   With no fitted scorer yet (cold start) every request is decided by 2.
Every decision's reason names the score, the threshold and the scorer version, and the decision
carries ``p_local`` for the shadow sampler (which aims where the scorer is least certain).
Pure: fitting is a function of outcomes; the gateway loads the fitted state from a file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from router.config import LearnedConfig
from router.decision import DecisionKind, RouteDecision
from router.features import RequestFeatures, unit_hash
from router.policy import RulePolicy
from router.request_text import RequestText
from router.scorer import Example, Scorer, ScorerConfig, calibrate_threshold
from router.scorer import fit as fit_scorer

Arm = Literal["local", "frontier"]

CALIBRATION_SHARE = 0.25  # of the local outcomes with text, held out to set the threshold
_EMPTY = RequestText()


@dataclass(slots=True)
class ArmCounts:
    accepted: float = 0.0
    rejected: float = 0.0

    @property
    def n(self) -> float:
        return self.accepted + self.rejected

    def mean(self) -> float:
        return (1 + self.accepted) / (2 + self.n)


@dataclass(frozen=True, slots=True)
class Outcome:
    class_key: str
    arm: Arm
    accepted: bool
    weight: float = 1.0
    text: RequestText | None = None


@dataclass(slots=True)
class Calibration:
    """Held-out local verdicts, scored by the fitted scorer."""

    scores: list[float] = field(default_factory=list)
    accepted: list[bool] = field(default_factory=list)

    def threshold(self, p_frontier: float, quality_target: float, min_samples: int) -> float:
        if len(self.scores) < min_samples:
            return math.inf
        return calibrate_threshold(
            self.scores, self.accepted, p_frontier, quality_target, marginal=True
        )


@dataclass(slots=True)
class LearnedState:
    """The fitted estimate; ``version`` is recorded with every decision it makes."""

    version: str
    classes: dict[str, dict[str, ArmCounts]] = field(default_factory=dict)
    scorer: Scorer | None = None
    calibration: Calibration = field(default_factory=Calibration)

    def counts(self, class_key: str, arm: Arm) -> ArmCounts:
        return self.classes.get(class_key, {}).get(arm, ArmCounts())

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "classes": {
                c: {a: [v.accepted, v.rejected] for a, v in arms.items()}
                for c, arms in self.classes.items()
            },
            "scorer": self.scorer.to_json() if self.scorer is not None else None,
            "calibration": {
                "scores": [round(s, 6) for s in self.calibration.scores],
                "accepted": self.calibration.accepted,
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LearnedState:
        scorer = data.get("scorer")
        cal = data.get("calibration") or {}
        return cls(
            str(data["version"]),
            {
                c: {a: ArmCounts(float(v[0]), float(v[1])) for a, v in arms.items()}
                for c, arms in data.get("classes", {}).items()
            },
            Scorer.from_json(scorer) if scorer else None,
            Calibration(
                [float(s) for s in cal.get("scores", [])],
                [bool(a) for a in cal.get("accepted", [])],
            ),
        )


def class_key(features: RequestFeatures, class_tags: Iterable[str]) -> str:
    """The evidence group of a request: its values of ``class_tags`` (``*`` without), with a
    ``|tools`` suffix when it offers tools. Reports and the RL loop's bookkeeping only."""
    values = [features.tags[t] for t in class_tags if t in features.tags]
    key = "|".join(values) if values else "*"
    return key + ("|tools" if features.has_tools else "")


def fit(
    outcomes: Iterable[Outcome],
    version: str,
    *,
    seed: int = 0,
    config: ScorerConfig | None = None,
    calibration_share: float = CALIBRATION_SHARE,
) -> LearnedState:
    """Counts per evidence group and arm, the scorer fitted on the outcomes that carry text
    (but the calibration share), and that share scored for the threshold (module docstring)."""
    state = LearnedState(version)
    local_seen = 0
    fitted: list[Example] = []
    held_out: list[Outcome] = []
    for o in outcomes:
        arms = state.classes.setdefault(o.class_key, {})
        counts = arms.setdefault(o.arm, ArmCounts())
        if o.accepted:
            counts.accepted += o.weight
        else:
            counts.rejected += o.weight
        if o.text is None:
            continue
        local_seen += o.arm == "local"
        if o.arm == "local" and _held_out(local_seen, calibration_share):
            held_out.append(o)
        else:
            fitted.append(Example(o.text, o.accepted, o.arm, o.weight))
    if any(e.arm == "local" for e in fitted):
        scorer = fit_scorer(fitted, version, seed=seed, config=config)
        state.scorer = scorer
        for o in held_out:
            assert o.text is not None
            state.calibration.scores.append(scorer.predict_local(o.text))
            state.calibration.accepted.append(o.accepted)
    return state


def _held_out(nth: int, share: float) -> bool:
    # By a stable hash of the position, not every k-th: periodic traffic (a client alternating
    # two kinds of request) would otherwise put a single kind in the held-out share.
    return unit_hash(str(nth), "calibration") < share


class LearnedPolicy:
    """Rules first (pinned aliases, matching rules); ``auto`` traffic by the request's score."""

    def __init__(self, rules: RulePolicy, config: LearnedConfig, state: LearnedState) -> None:
        self._rules = rules
        self._config = config
        self._state = state
        self._version = f"{rules.version}+{state.version}"
        scorer = state.scorer
        if scorer is None:
            self.threshold = math.inf
        else:
            self.threshold = state.calibration.threshold(
                scorer.frontier.mean(), config.quality_target, config.min_samples
            )

    @property
    def version(self) -> str:
        return self._version

    @property
    def state(self) -> LearnedState:
        return self._state

    def model_names(self) -> list[str]:
        return self._rules.model_names()

    def chain(self, target: str) -> tuple[str, ...]:
        return self._rules.chain(target)

    def predict_local_accept(self, features: RequestFeatures) -> float | None:
        """Estimated probability that the local model's answer is accepted (None: no scorer)."""
        scorer = self._state.scorer
        return None if scorer is None else scorer.predict_local(features.text or _EMPTY)

    def decide(self, features: RequestFeatures) -> RouteDecision:
        base = self._rules.decide(features)
        cfg = self._config
        if base.kind != "default":
            local = 1.0 if base.target == cfg.local_target else 0.0
            return self._decision(base.target, base.reason, None, base.kind, local)
        p = self.predict_local_accept(features)
        scorer = self._state.scorer
        if p is None or scorer is None:
            why = "p_local=none (no scorer fitted yet)"
        else:
            why = f"p_local={p:.3f} threshold={self.threshold:.3f} scorer={scorer.version}"
            if p >= self.threshold:
                return self._decision(
                    cfg.local_target, f"learned:local {why}", p, "learned_local", 1.0
                )
        # Below the cut, local only by the exploration draw: its probability is the propensity.
        explore = cfg.exploration_share
        if unit_hash(features.request_id or "", "explore") < explore:
            return self._decision(
                cfg.local_target, f"learned:explore {why}", p, "learned_explore", explore
            )
        return self._decision(
            cfg.frontier_target, f"learned:frontier {why}", p, "learned_frontier", explore
        )

    def _decision(
        self,
        target: str,
        reason: str,
        p_local: float | None,
        kind: DecisionKind,
        propensity: float,
    ) -> RouteDecision:
        threshold = self.threshold if math.isfinite(self.threshold) else None
        return RouteDecision(
            self._rules.chain(target),
            reason,
            self._version,
            p_local,
            kind=kind,
            threshold=threshold,
            propensity=propensity,
            state_version=self._state.version,
        )
