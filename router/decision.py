"""What the router answers: an ordered chain of targets and why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RouteDecision:
    """``targets[0]`` is tried first; the rest is the fallback chain, in order."""

    targets: tuple[str, ...]
    reason: str
    policy_version: str
    p_local: float | None = None  # the learned scorer's estimate, when one decided

    @property
    def target(self) -> str:
        return self.targets[0]
