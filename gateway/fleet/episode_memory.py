"""What the gateway remembers of each episode's routing (``router.episode_fallback``): kept in
this process (``fleet.backend: local``), or in Redis, so every gateway of a fleet sees it.

An agent's consecutive turns may reach different gateway processes (any load balancer), so the
episode's local steps and its fallback must be visible to all of them.

- :class:`LocalEpisodeMemory`: a map bounded by ``routing.episodes.memory_episodes`` (least
  recently seen forgotten first) whose entries expire after ``memory_ttl_s``.
- :class:`RedisEpisodeMemory`: one hash per episode, ``<fleet.name>:episode:<episode id>``, with
  fields ``local:<step>`` (a step sent to a local target) and ``fallback`` (``<step>|<reason>``);
  each write renews its expiry (``memory_ttl_s``). A read is one ``HGETALL``, a write one
  pipelined ``HSET`` + ``EXPIRE``. Redis unreachable: a read answers an empty memory (the policy
  decides alone: no fallback is missed for longer than the outage), a write is dropped; both are
  counted (``switchyard_episode_memory_failures``) and Redis is not asked again for
  ``fleet.retry_s`` (a request never waits on a Redis known to be down).
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

from gateway.redis_scripts import redis_error
from router.episode_fallback import KEPT_LOCAL_STEPS, EpisodeMemory

if TYPE_CHECKING:
    # Annotations only: this module is on the gateway's start-up path (the local memory), where
    # importing redis is slow (docs/hot_path.md); RedisEpisodeMemory imports what it needs when
    # built.
    import redis.asyncio as aioredis

log = logging.getLogger(__name__)

_LOCAL: Final = "local:"
_FALLBACK: Final = "fallback"


class EpisodeMemoryStore(Protocol):
    """Per episode: the steps sent local and the fallback in force."""

    async def recall(self, episode_id: str) -> EpisodeMemory: ...

    async def note_local(self, episode_id: str, step: int) -> None: ...

    async def note_fallback(self, episode_id: str, step: int, reason: str) -> None: ...

    def stats(self) -> dict[str, float]:
        """Gauges and counters for ``/metrics``."""
        ...

    async def aclose(self) -> None: ...


class LocalEpisodeMemory:
    """This process's memory of episodes (see the module docstring)."""

    def __init__(
        self,
        max_episodes: int,
        ttl_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max = max_episodes
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._episodes: OrderedDict[str, tuple[float, EpisodeMemory]] = OrderedDict()

    def _get(self, episode_id: str) -> EpisodeMemory:
        entry = self._episodes.get(episode_id)
        if entry is None:
            return EpisodeMemory()
        if self._monotonic() - entry[0] > self._ttl_s:
            del self._episodes[episode_id]
            return EpisodeMemory()
        return entry[1]

    def _put(self, episode_id: str, memory: EpisodeMemory) -> None:
        self._episodes[episode_id] = (self._monotonic(), memory)
        self._episodes.move_to_end(episode_id)
        while len(self._episodes) > self._max:
            self._episodes.popitem(last=False)

    async def recall(self, episode_id: str) -> EpisodeMemory:
        memory = self._get(episode_id)
        if episode_id in self._episodes:
            self._episodes.move_to_end(episode_id)
        return memory

    async def note_local(self, episode_id: str, step: int) -> None:
        self._put(episode_id, self._get(episode_id).with_local(step))

    async def note_fallback(self, episode_id: str, step: int, reason: str) -> None:
        memory = self._get(episode_id)
        self._put(
            episode_id,
            EpisodeMemory(memory.local_steps, fallback_step=step, fallback_reason=reason),
        )

    def stats(self) -> dict[str, float]:
        return {"episodes": float(len(self._episodes)), "failures": 0.0}

    async def aclose(self) -> None:
        return None


def decode_memory(fields: Mapping[Any, Any]) -> EpisodeMemory:
    """An :class:`EpisodeMemory` from its Redis hash (fields that do not parse are ignored)."""
    steps: list[int] = []
    fallback_step: int | None = None
    reason = ""
    for raw_key, raw_value in fields.items():
        key = raw_key.decode() if isinstance(raw_key, bytes) else raw_key
        value = raw_value.decode() if isinstance(raw_value, bytes) else raw_value
        if key.startswith(_LOCAL) and key[len(_LOCAL) :].isdigit():
            steps.append(int(key[len(_LOCAL) :]))
        elif key == _FALLBACK:
            step, sep, why = value.partition("|")
            if sep and step.isdigit():
                fallback_step, reason = int(step), why
    return EpisodeMemory(frozenset(sorted(steps)[-KEPT_LOCAL_STEPS:]), fallback_step, reason)


class RedisEpisodeMemory:
    """The fleet's memory of episodes in Redis (see the module docstring)."""

    def __init__(
        self,
        client: aioredis.Redis,
        namespace: str,
        *,
        ttl_s: float,
        retry_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._errors = (redis_error(), OSError)  # redis is imported when a client exists
        self.client = client
        self._namespace = namespace
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._retry_s = retry_s
        self._monotonic = monotonic
        self._skip_until = -math.inf
        self._down = False
        self.failures = 0

    def key(self, episode_id: str) -> str:
        return f"{self._namespace}:episode:{episode_id}"

    def _skipping(self) -> bool:
        return self._monotonic() < self._skip_until

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self._skip_until = self._monotonic() + self._retry_s
        if not self._down:
            # The exception text names host and port, never the URL's password.
            log.warning("episode memory: Redis unavailable (%s: %s)", type(exc).__name__, exc)
        self._down = True

    def _ok(self) -> None:
        if self._down:
            log.info("episode memory: Redis reachable again")
            self._down = False

    async def recall(self, episode_id: str) -> EpisodeMemory:
        if self._skipping():
            return EpisodeMemory()
        try:
            fields = await self.client.hgetall(self.key(episode_id))  # type: ignore[misc]
        except self._errors as exc:
            self._failed(exc)
            return EpisodeMemory()
        self._ok()
        return decode_memory(fields)

    async def _write(self, episode_id: str, field: str, value: str) -> None:
        if self._skipping():
            self.failures += 1  # a write dropped while Redis is down
            return
        key = self.key(episode_id)
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                pipe.hset(key, field, value)
                pipe.pexpire(key, self._ttl_ms)
                await pipe.execute()
        except self._errors as exc:
            self._failed(exc)
            return
        self._ok()

    async def note_local(self, episode_id: str, step: int) -> None:
        await self._write(episode_id, f"{_LOCAL}{step}", "1")

    async def note_fallback(self, episode_id: str, step: int, reason: str) -> None:
        await self._write(episode_id, _FALLBACK, f"{step}|{reason}")

    def stats(self) -> dict[str, float]:
        return {"failures": float(self.failures)}

    async def aclose(self) -> None:
        await self.client.aclose()
