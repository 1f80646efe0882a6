"""The requests a gateway process is serving, and the drain that ends them at shutdown.

An exchange registers when it starts and leaves when it is finished (exactly once, where its
record is written). On SIGTERM :meth:`InFlightRequests.begin_drain` turns ``/ready`` to 503 at
once, and what is still in flight after ``limits.drain_timeout_s`` is aborted: each answers a 503
``server_shutting_down`` in its door's shape (a stream its error event) and is recorded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol


class Abortable(Protocol):
    """A request being served, which shutdown can end early (``doors.exchange.Exchange``)."""

    def abort(self) -> None: ...


@dataclass
class InFlightRequests:
    """Requests in flight by id, and whether shutdown began."""

    live: dict[str, Abortable] = field(default_factory=dict)
    draining: bool = False

    @property
    def count(self) -> int:
        return len(self.live)

    def begin_drain(self, timeout_s: float) -> None:
        """Shutdown began: ``/ready`` answers 503 now; what is still in flight after
        ``timeout_s`` is aborted."""
        if self.draining:
            return
        self.draining = True
        asyncio.get_running_loop().call_later(timeout_s, self.abort_all)

    def abort_all(self) -> None:
        for request in list(self.live.values()):
            request.abort()
