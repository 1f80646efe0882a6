"""What a request is routed by: a policy and the back-ends it may send to, and the canary.

Both are immutable values swapped whole by the one reload authority
(:class:`~gateway.routing.reload.Reloader`): a request reads them once
(:meth:`~gateway.routing.decider.Decider.view`) and keeps them, so a reload never drops it and its
decision is made by one routing version and one canary, never a mix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gateway.backends.base import Backend
from gateway.config import SwitchyardConfig
from router.config import LearnedConfig, RoutingConfig
from router.learned import LearnedPolicy, LearnedState
from router.policy import RoutingPolicy, RulePolicy


@dataclass(frozen=True, slots=True)
class Routing:
    """The swappable unit: a policy, the back-ends it routes to, and the config they came from."""

    policy: RoutingPolicy
    backends: dict[str, Backend]
    config: SwitchyardConfig


@dataclass(frozen=True, slots=True)
class Canary:
    """A candidate policy deciding ``share`` of the requests (by a stable hash of their id).

    ``weights``: the candidate's weights version, for a release of weights and routing together
    (its arm's local answers come only from replicas serving it, live's from the others);
    ``schedule``: the shares of the stages still to come after this one (a passed test moves to
    the next, the last promotes); ``paused``: no request goes to the candidate arm for now;
    ``shadow``: a release's shadow stage (paused, with weights): this share of all requests is
    answered again by the candidate's weights off the users' path (gateway.doors.shadow)."""

    policy: RoutingPolicy
    share: float
    routing: RoutingConfig
    weights: str | None = None
    schedule: tuple[float, ...] = ()
    paused: bool = False
    shadow: float = 0.0


@dataclass(frozen=True, slots=True)
class RoutingView:
    """What one request is decided and served by: read once when it starts."""

    routing: Routing
    canary: Canary | None = None


def load_learned_state(config: SwitchyardConfig) -> LearnedState | None:
    """The fitted state named by ``routing.learned.state_file`` (blocking: call off the loop)."""
    return read_learned_state(config.routing.learned)


def read_learned_state(learned: LearnedConfig | None) -> LearnedState | None:
    """The fitted state ``learned.state_file`` names; unfitted when the file does not exist yet
    (blocking: call off the loop)."""
    if learned is None:
        return None
    if learned.state_file and Path(learned.state_file).exists():
        return LearnedState.from_json(json.loads(Path(learned.state_file).read_text()))
    return LearnedState("unfitted")


def build_policy(
    config: SwitchyardConfig, routing: RoutingConfig, learned_state: LearnedState | None
) -> RoutingPolicy:
    """The rules of ``routing`` over ``config``'s back-ends, learned where ``routing`` says so."""
    rules = RulePolicy(routing, config.backends)
    if routing.learned is None:
        return rules
    return LearnedPolicy(rules, routing.learned, learned_state or LearnedState("unfitted"))
