"""USD budgets per API key, enforced from recorded cost without a database write per request.

How it works:

- A key's spend seen here = ``base`` (the store's ``spent_usd``, as last read) + ``pending``
  (recorded here, not yet sent to the store) + ``flushing`` (being sent now).
- :meth:`BudgetGuard.record_spend` adds to ``pending`` at once, so this process enforces the
  budget from the very next request; it never waits on the store.
- A background task adds each key's ``pending`` to the store every ``flush_interval_s`` with one
  ``add_spend`` per key (batched), and takes the total it returns as the new ``base``.
- The :class:`~gateway.auth.keys.Authenticator` re-reads a key (in the background) once its cache
  entry is ``cache_ttl_s`` old and hands the record to :meth:`BudgetGuard.observe`, which brings
  in what other gateway processes spent. Each ``base`` carries the time its value was read; an
  older read never replaces a newer one.
- :meth:`BudgetGuard.check` refuses (403 ``budget_exceeded``) once spend >= budget; the message
  shows amounts under $1 to three significant digits (``$0.0004``), never as ``$0.00``.

Bounds: the check runs before a call, so the call that crosses the budget completes (its cost is
known only afterwards); with several processes the overshoot is at most what the others spend in
``flush_interval_s + cache_ttl_s`` and one store round trip (up to ``max_stale_s`` while the store
does not answer reads). If the store is unavailable, the amount stays pending and is
retried on the next tick; an ``add_spend`` that failed after committing may then be counted twice
(an overcount, never an undercount). :meth:`BudgetGuard.close` makes a last flush.

Across a fleet (:meth:`BudgetGuard.share`, with ``fleet.backend: redis``): :meth:`reserve` holds a
call's expected cost in Redis before the call (its counted input's cost plus the key's mean
output cost, gateway.doors.prompt_gate) and :meth:`settle` releases that reservation with the
real cost after, atomically, so N gateways overshoot by at most the calls in flight
(:mod:`gateway.auth.shared_budget`); the store stays the durable record, flushed as above.

Memory: one entry per key that has spent or been read, bounded by the number of keys in the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.auth.config import DEFAULT_BUDGET_FLUSH_INTERVAL_S
from gateway.auth.spend import PrincipalView, format_usd
from gateway.errors import PermissionDeniedError
from traffic.store.backend import StoreBackend
from traffic.store.errors import StoreDataError, StoreUnavailable
from traffic.store.records import ApiKeyRecord

if TYPE_CHECKING:
    from gateway.auth.shared_budget import Reservation, SharedBudget

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Spend:
    base: float = 0.0
    base_read_at: float = -math.inf
    pending: float = 0.0
    flushing: float = 0.0

    @property
    def total(self) -> float:
        return self.base + self.pending + self.flushing


@dataclass(slots=True)
class BudgetStats:
    flushes: int = 0
    flush_failures: int = 0
    usd_flushed: float = 0.0


class BudgetGuard:
    """Spend per key: known at once in this process, persisted to the store in the background."""

    def __init__(
        self,
        store: StoreBackend,
        *,
        flush_interval_s: float = DEFAULT_BUDGET_FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._interval = flush_interval_s
        self._clock = clock
        self._spend: dict[str, _Spend] = {}
        self._task: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()
        self._closed = False
        self._store_down = False
        self.stats = BudgetStats()
        self._shared: SharedBudget | None = None
        self._settling: set[asyncio.Task[None]] = set()

    def share(self, shared: SharedBudget) -> None:
        """Enforce budgets across the fleet through ``shared`` (see the module docstring)."""
        self._shared = shared

    @property
    def shared(self) -> SharedBudget | None:
        return self._shared

    # Reading.

    def spent(self, key_id: str) -> float:
        """USD spent by ``key_id`` as far as this process knows."""
        s = self._spend.get(key_id)
        return s.total if s is not None else 0.0

    def observe(self, record: ApiKeyRecord, read_at: float | None = None) -> None:
        """Take the store's ``spent_usd`` as the base, unless a newer value is known already.

        ``read_at`` is the clock value when the read was issued (default: now).
        """
        at = self._clock() if read_at is None else read_at
        s = self._spend.setdefault(record.id, _Spend())
        if at >= s.base_read_at:
            s.base = record.spent_usd
            s.base_read_at = at

    def check(self, principal: PrincipalView) -> None:
        """Raise :class:`PermissionDeniedError` ``budget_exceeded`` when spend >= budget."""
        if principal.budget_usd is None or principal.key_id is None:
            return
        spent = self.spent(principal.key_id)
        if spent >= principal.budget_usd:
            raise PermissionDeniedError(
                f"API key '{principal.name}' has used its budget of "
                f"{format_usd(principal.budget_usd)} (spent {format_usd(spent)}).",
                code="budget_exceeded",
            )

    async def reserve(
        self, principal: PrincipalView, input_usd: float | None = None
    ) -> Reservation | None:
        """Before a call, across the fleet: hold its expected cost (``input_usd``: what its
        counted prompt costs; None: unknown), or refuse (403) when the key's settled and held
        spend has reached its budget. None without a fleet, a budget, or while Redis is
        unreachable (:meth:`check` stands then); else the call's reservation, for
        :meth:`settle`."""
        key_id = principal.key_id
        if self._shared is None or principal.budget_usd is None or key_id is None:
            return None
        return await self._shared.reserve(principal, self.spent(key_id), input_usd)

    def settle(
        self, principal: PrincipalView, usd: float | None, reservation: Reservation | None = None
    ) -> None:
        """After a call, whatever its end: its cost counts now (:meth:`record_spend`) and, across
        the fleet, replaces the call's ``reservation`` (in the background). Sync."""
        key_id = principal.key_id
        if key_id is None:
            return
        self.record_spend(key_id, usd)
        if self._shared is None or principal.budget_usd is None:
            return
        cost = usd if usd is not None and math.isfinite(usd) and usd > 0 else 0.0
        if reservation is None and not cost:
            return
        task = asyncio.get_running_loop().create_task(
            self._shared.settle(key_id, reservation, cost)
        )
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)

    # Writing.

    def record_spend(self, key_id: str | None, usd: float | None) -> None:
        """Count ``usd`` against ``key_id`` now; persist it soon. Sync and cheap, never blocks.

        Anonymous calls (``key_id`` None) and zero or unknown costs are ignored. Must be called
        from the event loop's thread (it starts the flusher on first use).
        """
        if key_id is None or not usd or usd <= 0 or not math.isfinite(usd):
            return
        self._spend.setdefault(key_id, _Spend()).pending += usd
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(
                self._flush_loop(), name="switchyard-budget-flush"
            )

    async def flush(self) -> None:
        """Send every pending amount to the store now (one ``add_spend`` per key)."""
        async with self._flush_lock:
            batch = {k: s.pending for k, s in self._spend.items() if s.pending > 0}
            for key_id, usd in batch.items():
                s = self._spend[key_id]
                s.pending -= usd
                s.flushing += usd
                try:
                    total = await self._store.add_spend(key_id, usd)
                except StoreDataError:
                    s.flushing -= usd
                    self.stats.flush_failures += 1
                    log.exception("budget: store refused spend of key %s; dropped", key_id)
                    continue
                except StoreUnavailable as exc:
                    # Kept pending; the next tick retries. Logged once per outage.
                    s.flushing -= usd
                    s.pending += usd
                    self.stats.flush_failures += 1
                    if not self._store_down:
                        log.warning("budget: store unavailable, spend kept pending: %s", exc)
                    self._store_down = True
                    return
                except BaseException:
                    # Cancelled or unexpected: keep the amount pending, let the caller see it.
                    s.flushing -= usd
                    s.pending += usd
                    raise
                if self._store_down:
                    log.info("budget: store reachable again")
                    self._store_down = False
                s.flushing -= usd
                self.stats.flushes += 1
                self.stats.usd_flushed += usd
                if total is None:
                    log.warning("budget: key %s is not in the store; spend dropped", key_id)
                    continue
                # The total is at least as new as this moment's: it wins over any read issued
                # before now (which may have missed this flush), and loses to any issued after.
                answered_at = self._clock()
                if answered_at >= s.base_read_at:
                    s.base = total
                    s.base_read_at = answered_at

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except Exception:  # a bug must not stop persistence for good; the amount stays pending
                log.exception("budget: flush failed")

    async def close(self) -> None:
        """Settle what is being settled, stop the background task and make a last flush (one
        attempt)."""
        self._closed = True
        if self._settling:
            await asyncio.gather(*self._settling, return_exceptions=True)
        if self._shared is not None:
            await self._shared.close()
        if self._task is not None:
            async with self._flush_lock:  # cancel between flushes, never in the middle of one
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
        lost = sum(s.pending for s in self._spend.values())
        if lost > 0:
            log.error("budget: $%.6f of spend could not be stored before shutdown", lost)
