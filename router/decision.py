"""What the router answers: an ordered chain of targets, what kind of decision chose it, and why
in words."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# What chose the chain; code that acts on a decision branches on this, never on ``reason``
# (a sentence for the record, the logs and the ``x-switchyard-route-reason`` header).
DecisionKind = Literal[
    "alias",  # the requested model is a pinned alias
    "target",  # the requested model is a target's own name
    "rule",  # a routing rule matched
    "default",  # the rules' default target
    "learned_local",  # the learned scorer predicts the local answer accepted
    "learned_explore",  # an exploration draw sent it local
    "learned_frontier",  # the learned policy kept it at the frontier
    "episode_fallback",  # a failed local agent step sent the episode's next turns on
    "episode_loop",  # an agent loop goes on on the model its earlier steps ran on
]
PINNED_KINDS: frozenset[DecisionKind] = frozenset({"alias", "target"})
LEARNED_KINDS: frozenset[DecisionKind] = frozenset(
    {"learned_local", "learned_explore", "learned_frontier"}
)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """``targets[0]`` is tried first; the rest is the fallback chain, in order."""

    targets: tuple[str, ...]
    reason: str
    policy_version: str
    p_local: float | None = None  # the learned scorer's estimate, when one decided
    kind: DecisionKind = field(kw_only=True)

    @property
    def target(self) -> str:
        return self.targets[0]
