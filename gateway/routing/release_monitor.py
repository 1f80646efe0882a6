"""The release monitor: the running canary's sequential test, fed by the users' verdicts.

While a canary runs, both arms decide every request (:class:`~gateway.routing.decider.Decider`);
at the end of an exchange :meth:`ReleaseMonitor.observe` keeps, for a request whose answer the
arms could give differently (``release_differs``), which arm served it and, for a local answer
not drawn by exploration, its segment (a bounded, oldest-first map: ``max_pending`` ids). When its
verdict arrives (``POST /v1/feedback``, ``accepted`` or ``rejected``),
:meth:`ReleaseMonitor.verdict` adds it to that release's :class:`router.sequential.ReleaseTest`;
the first time the test decides ``rollback`` (or ``promote``, where ``auto_promote``), the
monitor hands a :class:`ReleaseEvent` to its ``act`` callback, which the app wires to the admin
operations (``gateway.admin.operations.act_on_release``: the canary dropped, moved to its next
stage or promoted on every gateway, in the change log as ``release-monitor``). A new stage
starts a new test (:meth:`ReleaseMonitor.restart`). Verdicts count on the gateway that served
the request (one test per gateway process).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gateway.config import ReleaseMonitorConfig
from router.decision import RouteDecision
from router.sequential import Decision, ReleaseTest

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReleaseEvent:
    release_id: str
    decision: Decision
    test: ReleaseTest

    def detail(self) -> dict[str, object]:
        """What the change log keeps of the decision."""
        return test_detail(self.test)


def test_detail(test: ReleaseTest) -> dict[str, object]:
    """A release test's figures as the change log and the release table keep them."""
    low, high = test.bounds()
    c, live = test.candidate, test.live
    return {
        "test": "sequential",
        "delta_low": round(low, 4),
        "delta_high": round(high, 4),
        "margin": test.margin,
        "candidate": {"verdicts": c.n, "accepted": c.accepted},
        "live": {"verdicts": live.n, "accepted": live.accepted},
        "local_floor": test.floor,
        "candidate_local": {
            segment: {"verdicts": a.n, "accepted": a.accepted, "high": round(a.interval()[1], 4)}
            for segment, a in sorted(test.local.items())
        },
        "under_floor": test.under_floor(),
    }


Act = Callable[[ReleaseEvent], Coroutine[Any, Any, None]]


class ReleaseMonitor:
    """Verdicts of the requests a canary's arms decided differently, into its test."""

    def __init__(
        self, config: ReleaseMonitorConfig, spawn: Callable[[Coroutine[Any, Any, None]], None]
    ) -> None:
        self.config = config
        self.act: Act | None = None  # set by the app: the admin operations
        self._spawn = spawn
        self._pending: OrderedDict[str, tuple[str, bool, float, str | None]] = OrderedDict()
        self._tests: dict[str, ReleaseTest] = {}
        self._decided: set[str] = set()

    def observe(
        self, inference_id: str, decision: RouteDecision, segment: str, local: bool
    ) -> None:
        """At an exchange's end: keep it if the arms of a running canary could answer it
        differently; ``local``: a local replica answered it."""
        release, p = decision.release_id, decision.release_p
        if not self.config.enabled or release is None or not decision.release_differs:
            return
        candidate = decision.release_arm == "candidate"
        if p is None:
            return
        share = p if candidate else 1.0 - p  # the candidate arm's share
        if not 0 < share < 1:  # a paused release assigns no one to it
            return
        guarded = local and decision.kind != "learned_explore"
        pending = self._pending
        pending[inference_id] = (release, candidate, share, segment if guarded else None)
        while len(pending) > self.config.max_pending:
            pending.popitem(last=False)

    def verdict(self, inference_id: str, accepted: bool) -> None:
        """A user's verdict; the release's test decides, and ``act`` is called once."""
        entry = self._pending.pop(inference_id, None)
        if entry is None:
            return
        release, candidate, share, segment = entry
        test = self._tests.get(release)
        if test is None:
            cfg = self.config
            test = ReleaseTest(share, cfg.margin, cfg.alpha, cfg.max_verdicts, cfg.local_floor)
            self._tests[release] = test
        test.add(candidate, accepted, segment)
        decided = test.decide()
        if decided == "continue" or release in self._decided:
            return
        if decided == "promote" and not self.config.auto_promote:
            return
        self._decided.add(release)
        log.warning("release %s: the sequential test says %s", release, decided)
        if self.act is not None:
            self._spawn(self.act(ReleaseEvent(release, decided, test)))

    def restart(self, release_id: str) -> None:
        """A new stage of ``release_id``: a new test (verdicts still awaited count in it)."""
        self._tests.pop(release_id, None)
        self._decided.discard(release_id)

    def test(self, release_id: str) -> ReleaseTest | None:
        return self._tests.get(release_id)
