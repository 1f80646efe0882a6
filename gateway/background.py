"""Background tasks of a gateway process, kept referenced until they end (asyncio keeps only a
weak reference to a task: an unreferenced one may be collected mid-run), and the periodic jobs
one process of a fleet runs on a lease (:class:`LeasedLoop`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Background:
    """Tasks started off a request's path (shadow calls, token accounting, drain reports)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class LeasedLoop:
    """A periodic job one process of a fleet runs (the console's roll-ups, the retention pass):
    ``work()`` now, then every ``interval_s()`` (read each time: a reload may change it), each
    round only when ``ready()`` and ``lead(lease_s)`` says this process holds the fleet's lease
    for the job. The lease asked for outlives two missed rounds, so a live leader keeps it. An
    error among ``retry_on`` (the store or the disk down) is logged, and the job runs again
    next round."""

    def __init__(self, name: str, retry_on: tuple[type[Exception], ...]) -> None:
        self.name, self.retry_on = name, retry_on
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        work: Callable[[], Awaitable[None]],
        interval_s: Callable[[], float],
        lead: Callable[[float], Awaitable[bool]],
        ready: Callable[[], bool] = lambda: True,
    ) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(work, interval_s, lead, ready))

    async def _loop(
        self,
        work: Callable[[], Awaitable[None]],
        interval_s: Callable[[], float],
        lead: Callable[[float], Awaitable[bool]],
        ready: Callable[[], bool],
    ) -> None:
        while True:
            every = interval_s()
            if ready() and await lead(3 * every):
                try:
                    await work()
                except self.retry_on as exc:
                    log.warning("%s failed, retrying in %.0f s: %s", self.name, every, exc)
            await asyncio.sleep(every)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
