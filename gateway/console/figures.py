"""Where a page's traffic figures come from: the raw record for short windows (exact), the
hourly roll-ups for windows of :data:`ROLLUP_FROM` or more (:mod:`traffic.store.rollup`: the
same figures, percentiles within a histogram bucket), so a page reads hundreds of rows however
much traffic its window holds.

:class:`RollUps` keeps the roll-ups current: a background task rolls up the closed hours every
``console.rollup_interval_s`` (by one gateway process of the fleet, which holds the roll-up
lease: ``Fleet.lead``; the roll-up is idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from traffic.store import StoreBackend, StoreError
from traffic.store.console_queries import SeriesPoint, Window, breakdown, series
from traffic.store.rollup import dims, roll_up, rolled_breakdown, rolled_series

log = logging.getLogger(__name__)

ROLLUP_FROM: Final = timedelta(hours=6)


def rolled(window: Window) -> bool:
    return window.until - window.since >= ROLLUP_FROM


async def group_figures(
    store: StoreBackend, window: Window, group: str, local_targets: Sequence[str]
) -> list[dict[str, Any]]:
    if rolled(window):
        return await rolled_breakdown(store, window, group, local_targets)
    return await breakdown(store, window, group, local_targets)


async def time_series(store: StoreBackend, window: Window, bucket_s: int) -> list[SeriesPoint]:
    if rolled(window) and bucket_s % 3600 == 0:
        return await rolled_series(store, window, bucket_s)
    return await series(store, window, bucket_s)


class RollUps:
    """The background task rolling up closed hours."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        store: Callable[[], StoreBackend | None],
        class_tag: Callable[[], str],
        interval_s: Callable[[], float],
        lead: Callable[[float], Awaitable[bool]],
    ) -> None:
        """Roll up now, then every ``interval_s()`` (read each time: a reload may change it),
        while ``lead(lease_s)`` says this process holds the fleet's roll-up lease: one gateway
        process of a fleet rolls up, not every one (each would take the store's write lock)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(store, class_tag, interval_s, lead))

    async def _loop(
        self,
        store: Callable[[], StoreBackend | None],
        class_tag: Callable[[], str],
        interval_s: Callable[[], float],
        lead: Callable[[float], Awaitable[bool]],
    ) -> None:
        while True:
            backend = store()
            # The lease outlives two missed rounds, so a live leader keeps it.
            if backend is not None and await lead(3 * interval_s()):
                try:
                    done = await roll_up(backend, dims(class_tag()), datetime.now(UTC))
                    log.debug("roll-ups: %s", done)
                except StoreError as exc:  # the store is down: try again next time
                    log.warning("roll-up failed, retrying in %.0f s: %s", interval_s(), exc)
            await asyncio.sleep(interval_s())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
