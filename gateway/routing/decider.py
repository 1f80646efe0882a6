"""The routing decision of every request, in one call.

    view = decider.view()                            read once, kept for the whole request
    decider.reads_text(view, features)               whether to build features.text (below)
    decision = decider.decide(view, features, tools)
      1. the canary's policy, for its share of requests (a stable hash of the request id;
         none while it is paused), else the live policy: aliases, first-match rules, then the
         learned scorer (router/)
      2. an agent episode's fallback may replace a local decision (gateway.routing.episodes)
    A release that carries weights pins the replica choice by arm (``release_weights``; the
    local back-end keeps the candidate arm on the candidate's replicas, live off them).

The request's text (``features.text``, :func:`router.chat_text.request_text`) is read by a learned
policy, for the requests its rules leave to the default (an alias mapped to null that no rule
matched), and by an agent episode's step; the door builds it only where :meth:`Decider.reads_text`
says one of them may read it (docs/hot_path.md), so a request for an explicit model, or any request
of a rules-only routing, is decided without it.

The decider only reads what it decides by; :class:`~gateway.routing.reload.Reloader`, the one
reload authority, changes it (:meth:`Decider.swap`) with no await between the parts it swaps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.routing.episodes import EpisodeRouting
from gateway.routing.table import Canary, Routing, RoutingView
from router.config import RoutingConfig
from router.decision import RouteDecision
from router.features import RequestFeatures, unit_hash
from router.learned import LearnedPolicy, LearnedState
from router.policy import RoutingPolicy, RulePolicy


def policy_reads_text(policy: RoutingPolicy, routing: RoutingConfig, model: str) -> bool:
    """Whether ``policy`` (built from ``routing``) may read the text of a request for ``model``:
    the rules never do; the learned policy scores only what they leave to the default, which
    needs ``model`` to be an alias mapped to null (``auto``); a policy of any other kind may."""
    if isinstance(policy, RulePolicy):
        return False
    if isinstance(policy, LearnedPolicy):
        return model in routing.aliases and routing.aliases[model] is None
    return True


class Decider:
    """Decides requests by the live routing and canary, then the episode fallback."""

    def __init__(
        self,
        routing: Routing,
        learned_state: LearnedState | None = None,
        episodes: EpisodeRouting | None = None,
    ) -> None:
        self._view = RoutingView(routing)
        self.learned_state = learned_state
        self.episodes = episodes if episodes is not None else EpisodeRouting()
        self.reloads = 0

    def view(self) -> RoutingView:
        """The routing and canary a request starting now is decided and served by."""
        return self._view

    @property
    def routing(self) -> Routing:
        return self._view.routing

    @property
    def canary(self) -> Canary | None:
        return self._view.canary

    def reads_text(self, view: RoutingView, features: RequestFeatures) -> bool:
        """Whether deciding ``features`` by ``view`` may read ``features.text`` (module
        docstring): the live policy's, the canary's or the episode step's. Pure: a door may ask
        from a worker thread."""
        model = features.requested_model
        canary = view.canary
        return (
            policy_reads_text(view.routing.policy, view.routing.config.routing, model)
            or (canary is not None and policy_reads_text(canary.policy, canary.routing, model))
            or self.episodes.reads_text(view.routing, features)
        )

    async def decide(
        self, view: RoutingView, features: RequestFeatures, tools: Any = None
    ) -> RouteDecision:
        """The decision for ``features`` (module docstring), which carry their ``text`` where
        :meth:`reads_text` says so; ``tools``: what the request offers, against which an agent
        episode's last local step is checked."""
        canary = view.canary
        if canary is None:
            decision = view.routing.policy.decide(features)
        else:
            decision = self._release_arm(view, canary, features)
        return await self.episodes.route(view.routing, features, tools, decision)

    @staticmethod
    def _release_arm(view: RoutingView, canary: Canary, features: RequestFeatures) -> RouteDecision:
        """Both arms decide every request: the record keeps the other arm's target, and the
        release's test reads only the requests on which their answers can differ (other
        targets, or, on a release carrying weights, a local answer from either arm)."""
        candidate = canary.policy.decide(features)
        live = view.routing.policy.decide(features)
        differs = candidate.target != live.target
        if canary.weights is not None and not differs:
            backend = view.routing.backends.get(live.target)
            differs = backend is not None and backend.kind == "vllm"
        share = 0.0 if canary.paused else canary.share
        on_candidate = unit_hash(features.request_id or "", "canary") < share
        chosen, other = (candidate, live) if on_candidate else (live, candidate)
        return replace(
            chosen,
            release_id=canary.routing.version,
            release_arm="candidate" if on_candidate else "live",
            release_p=share if on_candidate else 1.0 - share,
            release_other=other.target,
            release_weights=canary.weights,
            release_differs=differs,
        )

    def swap(self, view: RoutingView, learned_state: LearnedState | None) -> None:
        """For the reload authority only: what requests starting from now are decided by, and
        the learned state its policy was built with."""
        if view.routing is not self._view.routing:
            self.reloads += 1
        self.learned_state = learned_state
        self._view = view
