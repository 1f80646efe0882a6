"""Health, load and weights version of one local target's vLLM replicas, as the gateway sees them.

A replica is taken out of rotation at once when a connection to it is refused (passive check,
gateway/backends/vllm.py) and by a background probe of ``GET /health`` (active check,
:class:`gateway.config.ReplicaHealthConfig`): at once on a refused connection or an error
status, after ``slow_probes_down`` timed-out probes in a row otherwise; one good probe brings it
back. In-flight counts are the gateway's own; the router's selector reads
:class:`router.replicas.ReplicaView` snapshots.

Weights version: what the replica's answers are tagged with, and what a release's arm selects
replicas by. The operators declare it: the config's ``weights_version`` at start, then the
fleet's replica controls (a hot swap's undrain: :meth:`ReplicaPool.apply_control`; the fleet
re-applies every control after each change of its state, and a control is news only when its
version differs from the one declared before). The replica's own word wins over it:
``GET /weight_info`` (vLLM's dev route; the hot swap sets it with ``/update_weight_version``),
read by the first good probe after the replica joins: the gateway's start, its return from down
(a restarted pod loads whatever its model path holds now, not what the last swap installed), its
undrain, a newly declared version. No such route, an error status or vLLM's unset value
(``"default"``) is no word: the declared version stays. A returning replica re-enters rotation
once its word was asked for, so no answer of new weights gets the old tag; a read that timed out
or was refused is tried again at the next probe, the declared version standing until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Final

import aiohttp

from gateway.config import ReplicaHealthConfig
from router.replicas import ReplicaView

log = logging.getLogger(__name__)

#: What vLLM's ``GET /weight_info`` answers until a version is set (``EngineCore``'s initial
#: ``_weight_version``): the replica does not know what it serves.
UNSET_WEIGHT_VERSION: Final = "default"


@dataclass(slots=True)
class ReplicaState:
    url: str
    healthy: bool = True
    in_flight: int = 0
    weights_version: str | None = None  # what its answers are tagged with (module docstring)
    drained: bool = False  # taken out of rotation by an operator (e.g. during a weight swap)
    slow_probes: int = 0  # timed-out health probes in a row
    declared_version: str | None = None  # the last version a fleet control declared
    version_unread: bool = True  # the next good probe reads its `GET /weight_info`


class ReplicaPool:
    def __init__(
        self,
        urls: list[str],
        weights_version: str | None = None,
        health: ReplicaHealthConfig | None = None,
    ) -> None:
        self.health = health or ReplicaHealthConfig()
        self.replicas = {
            u.rstrip("/"): ReplicaState(
                u.rstrip("/"), weights_version=weights_version, declared_version=weights_version
            )
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
        state = self.replicas[url]
        state.healthy = False
        state.version_unread = True  # it may come back on other weights (a restarted pod)

    def apply_control(self, url: str, drained: bool, weights_version: str | None) -> None:
        """A fleet control of ``url``: in or out of rotation, and the version operators declare
        it serves (None: none declared). See the module docstring for which word wins."""
        state = self.replicas[url]
        if state.drained and not drained:
            state.version_unread = True
        state.drained = drained
        if weights_version is not None and weights_version != state.declared_version:
            state.declared_version = state.weights_version = weights_version
            state.version_unread = True

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
        self.apply_control(url, False, None)

    async def _probe(self, session: aiohttp.ClientSession, state: ReplicaState) -> None:
        timeout = aiohttp.ClientTimeout(total=self.health.timeout_s)
        try:
            async with session.get(state.url + "/health", timeout=timeout) as resp:
                up = resp.status == 200
        except TimeoutError:  # aiohttp's ServerTimeoutError included: busy, maybe not down
            state.slow_probes += 1
            if state.slow_probes >= self.health.slow_probes_down:
                self.mark_down(state.url)
            return
        except aiohttp.ClientError:
            up = False
        state.slow_probes = 0
        if not up:
            self.mark_down(state.url)
            return
        if state.version_unread:
            await self._read_version(session, state)
        state.healthy = True

    async def _read_version(self, session: aiohttp.ClientSession, state: ReplicaState) -> None:
        """Take the replica's own word on its weights, if it has one (module docstring)."""
        timeout = aiohttp.ClientTimeout(total=self.health.timeout_s)
        try:
            async with session.get(state.url + "/weight_info", timeout=timeout) as resp:
                info = await resp.json(content_type=None) if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError):  # asked again at the next probe
            return
        except ValueError:  # not JSON: no word
            info = None
        state.version_unread = False
        version = info.get("weight_version") if isinstance(info, dict) else None
        if not isinstance(version, str) or version in ("", UNSET_WEIGHT_VERSION):
            return
        if version != state.weights_version:
            log.warning(
                "replica %s serves weights %s (was tagged %s)",
                state.url,
                version,
                state.weights_version,
            )
            state.weights_version = version

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
