"""Health and load of one local target's vLLM replicas, as the gateway sees them.

A replica is taken out of rotation at once when a connection to it fails (passive check) and by
a background probe of ``GET /health`` every ``probe_interval_s`` (active check); the probe also
brings it back. In-flight counts are the gateway's own; the router's selector reads
:class:`router.replicas.ReplicaView` snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import aiohttp

from router.replicas import ReplicaView

PROBE_INTERVAL_S = 0.5
PROBE_TIMEOUT_S = 1.0


@dataclass(slots=True)
class ReplicaState:
    url: str
    healthy: bool = True
    in_flight: int = 0
    weights_version: str | None = None
    drained: bool = False  # taken out of rotation by an operator (e.g. during a weight swap)


class ReplicaPool:
    def __init__(self, urls: list[str], weights_version: str | None = None) -> None:
        self.replicas = {
            u.rstrip("/"): ReplicaState(u.rstrip("/"), weights_version=weights_version)
            for u in urls
        }
        self._task: asyncio.Task[None] | None = None

    def views(self) -> list[ReplicaView]:
        return [
            ReplicaView(r.url, r.healthy and not r.drained, r.in_flight)
            for r in self.replicas.values()
        ]

    def acquire(self, url: str) -> None:
        """A request to ``url`` starts; :meth:`release` it once, however it ends."""
        self.replicas[url].in_flight += 1

    def release(self, url: str) -> None:
        """A request to ``url`` ended (its answer was read or its stream closed)."""
        self.replicas[url].in_flight -= 1

    def mark_down(self, url: str) -> None:
        self.replicas[url].healthy = False

    def set_weights_version(self, url: str, version: str | None) -> None:
        self.replicas[url].weights_version = version

    async def drain(self, url: str, timeout_s: float) -> int:
        """Stop routing to ``url`` and wait until its requests in flight are done (or the timeout).

        Returns the requests still in flight (0 when fully drained).
        """
        state = self.replicas[url]
        state.drained = True
        deadline = asyncio.get_running_loop().time() + timeout_s
        while state.in_flight > 0 and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return state.in_flight

    def undrain(self, url: str) -> None:
        self.replicas[url].drained = False

    async def _probe(self, session: aiohttp.ClientSession, state: ReplicaState) -> None:
        try:
            async with session.get(
                state.url + "/health", timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
            ) as resp:
                state.healthy = resp.status == 200
        except (aiohttp.ClientError, TimeoutError):
            state.healthy = False

    async def _probe_loop(self, session: aiohttp.ClientSession, interval: float) -> None:
        while True:
            await asyncio.gather(*(self._probe(session, r) for r in self.replicas.values()))
            await asyncio.sleep(interval)

    def start_probing(
        self, session: aiohttp.ClientSession, interval: float = PROBE_INTERVAL_S
    ) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._probe_loop(session, interval))

    async def stop_probing(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
