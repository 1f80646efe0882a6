"""The routing decision of every request, in one call.

    view = decider.view()                            read once, kept for the whole request
    decision = decider.decide(view, features, tools)
      1. the canary's policy, for its share of requests (a stable hash of the request id;
         none while it is paused), else the live policy: aliases, first-match rules, then the
         learned scorer (router/)
      2. an agent episode's fallback may replace a local decision (gateway.routing.episodes)
    A release that carries weights pins the replica choice by arm (``release_weights``; the
    local back-end keeps the candidate arm on the candidate's replicas, live off them).

The decider only reads what it decides by; :class:`~gateway.routing.reload.Reloader`, the one
reload authority, changes it (:meth:`Decider.swap`) with no await between the parts it swaps.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gateway.routing.episodes import EpisodeRouting
from gateway.routing.table import Canary, Routing, RoutingView
from router.decision import RouteDecision
from router.features import RequestFeatures, unit_hash
from router.learned import LearnedState


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

    async def decide(
        self, view: RoutingView, features: RequestFeatures, tools: Any = None
    ) -> RouteDecision:
        """The decision for ``features`` (module docstring); ``tools``: what the request offers,
        against which an agent episode's last local step is checked."""
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
