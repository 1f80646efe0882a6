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
    "learned_check",  # would go local by score; a frontier-check draw kept it at the frontier
    "episode_fallback",  # a failed local agent step sent the episode's next turns on
    "episode_loop",  # an agent loop goes on on the model its earlier steps ran on
]
ReleaseArm = Literal["candidate", "live"]  # which policy of a running canary decided
PINNED_KINDS: frozenset[DecisionKind] = frozenset({"alias", "target"})
LEARNED_KINDS: frozenset[DecisionKind] = frozenset(
    {"learned_local", "learned_explore", "learned_frontier", "learned_check"}
)


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """``targets[0]`` is tried first; the rest is the fallback chain, in order.

    What off-policy estimates need is kept typed, never only in ``reason``: ``propensity`` is
    the probability that the deciding policy sends this request to its local target,
    exploration included (1 or 0 for a deterministic choice; None where the policy has no
    local target); ``decided`` the target the policy chose before an episode's fallback
    replaced it; ``release_*`` the canary arm that decided and its assignment probability."""

    targets: tuple[str, ...]
    reason: str
    policy_version: str
    p_local: float | None = None  # the learned scorer's estimate, when one decided
    kind: DecisionKind = field(kw_only=True)
    threshold: float | None = field(default=None, kw_only=True)  # the learned cut p_local met
    propensity: float | None = field(default=None, kw_only=True)
    state_version: str | None = field(default=None, kw_only=True)  # the learned state's
    decided: str | None = field(default=None, kw_only=True)  # None: targets[0]
    release_id: str | None = field(default=None, kw_only=True)  # the canary's policy version
    release_arm: ReleaseArm | None = field(default=None, kw_only=True)
    release_p: float | None = field(default=None, kw_only=True)  # the arm's assignment prob.
    release_other: str | None = field(default=None, kw_only=True)  # the other arm's target
    # A release that carries weights: the candidate's weights version. The candidate arm's local
    # answers come only from replicas serving it, the live arm's only from the others.
    release_weights: str | None = field(default=None, kw_only=True)
    # Whether the arms' answers to this request can differ: other targets, or both local on a
    # release that carries weights (only such requests tell the arms apart).
    release_differs: bool = field(default=False, kw_only=True)

    @property
    def target(self) -> str:
        return self.targets[0]

    @property
    def weights_pin(self) -> tuple[str, bool] | None:
        """For the local back-end: the release's candidate weights, and whether this request's
        arm must be served by them (candidate) or kept off them (live); None: any replica."""
        if self.release_weights is None:
            return None
        return self.release_weights, self.release_arm == "candidate"

    @property
    def decided_target(self) -> str:
        """The target the policy chose, before an episode's fallback (or loop) replaced it."""
        return self.decided if self.decided is not None else self.targets[0]
