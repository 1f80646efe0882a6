"""Health and load of one local target's vLLM replicas, as the gateway sees them.

A replica is taken out of rotation at once when a connection to it is refused (passive check,
gateway/backends/vllm.py) and by a background probe of ``GET /health`` (active check,
:class:`gateway.config.ReplicaHealthConfig`): at once on a refused connection or an error
status, after ``slow_probes_down`` timed-out probes in a row otherwise; one good probe brings it
back. In-flight counts are the gateway's own; the router's selector reads
:class:`router.replicas.ReplicaView` snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import aiohttp

from gateway.config import ReplicaHealthConfig
from router.replicas import ReplicaView


@dataclass(slots=True)
class ReplicaState:
    url: str
    healthy: bool = True
    in_flight: int = 0
    weights_version: str | None = None
    drained: bool = False  # taken out of rotation by an operator (e.g. during a weight swap)
    slow_probes: int = 0  # timed-out health probes in a row


class ReplicaPool:
    def __init__(
        self,
        urls: list[str],
        weights_version: str | None = None,
        health: ReplicaHealthConfig | None = None,
    ) -> None:
        self.health = health or ReplicaHealthConfig()
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
        timeout = aiohttp.ClientTimeout(total=self.health.timeout_s)
        try:
            async with session.get(state.url + "/health", timeout=timeout) as resp:
                state.healthy = resp.status == 200
        except TimeoutError:  # aiohttp's ServerTimeoutError included: busy, maybe not down
            state.slow_probes += 1
            if state.slow_probes >= self.health.slow_probes_down:
                state.healthy = False
            return
        except aiohttp.ClientError:
            state.healthy = False
        state.slow_probes = 0

    async def _probe_loop(self, session: aiohttp.ClientSession) -> None:
        while True:
            await asyncio.gather(*(self._probe(session, r) for r in self.replicas.values()))
            await asyncio.sleep(self.health.interval_s)

    def start_probing(self, session: aiohttp.ClientSession) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._probe_loop(session))

    async def stop_probing(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
