"""Where a page's traffic figures come from: the raw record for short windows (exact), the
hourly roll-ups for windows of :data:`ROLLUP_FROM` or more (:mod:`traffic.store.rollup`: the
same figures, percentiles within a histogram bucket), so a page reads hundreds of rows however
much traffic its window holds.

:func:`roll_up_now` keeps the roll-ups current: the console runs it every
``console.rollup_interval_s`` on the fleet's roll-up lease (``gateway.background.LeasedLoop``,
``Fleet.lead``; the roll-up is idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from traffic.store import StoreBackend
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


async def roll_up_now(store: StoreBackend, class_tag: str) -> None:
    """Roll up the closed hours (idempotent): the console's job on the fleet's roll-up lease
    (``gateway.background.LeasedLoop``; one gateway process of a fleet rolls up, not every one:
    each would take the store's write lock)."""
    done = await roll_up(store, dims(class_tag), datetime.now(UTC))
    log.debug("roll-ups: %s", done)
