"""The record writer: gets traffic records into the store off the request path, losing none.

Flow of a record::

    submit() ──> bounded asyncio.Queue ──> drain task: batches of batch_size, or whatever came
       │                                   within flush_interval_s ──> backend inserts
       │ queue full                                        │ database unreachable
       v                                                   v
    overflow list ──> overflow task ───────────────────> spool (JSON lines, fsync'd, on disk)
                                                           │
    replay task: when something was spooled (and at start), ping the database with exponential
    back-off (retry_initial_s .. retry_max_s, jittered); once it answers, replay every spool
    segment in batches and delete each segment when all of it is stored.

Policy, in order of preference: the database; else the spool; never a silent drop.

- ``submit(record)`` is synchronous, O(1), never blocks and never raises; call it on the event
  loop's thread. A full queue sends the record to the spool (``queue_full_total``); records are
  never dropped to protect memory, only moved to disk.
- While the database is unreachable (``StoreUnavailable``), batches go straight to the spool
  instead of waiting on timeouts; the replay task finds out when it is back.
- Inserts are idempotent by id, so whatever is replayed twice (a batch both written and spooled
  when a timeout cut an insert short) is stored once.
- A record the database refuses as invalid (``StoreDataError``; e.g. NUL characters in jsonb) is
  isolated from its batch, which is stored without it, and appended to the spool's dead letters
  (``rejected_total``), kept for a person to look at.
- If the spool itself cannot be written (disk full), the records stay in memory and the overflow
  task retries with back-off (``spool_errors_total``); only after :meth:`close` has given up on
  both database and disk are records counted in ``lost_total`` (and logged at CRITICAL).

``close(timeout)`` drains the queue into the database (or the spool), spools the overflow, then
replays the spool if the database is up and time is left; what remains stays in the spool for the
next start. The writer does not own the backend: close the backend after the writer.

:meth:`stats` returns a snapshot for metrics (counters are totals since start).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
from collections.abc import Sequence
from typing import Literal

from gateway.store.backend import StoreBackend
from gateway.store.config import DEFAULT_CLOSE_TIMEOUT_S, StoreConfig
from gateway.store.errors import StoreError, StoreUnavailable
from gateway.store.records import FeedbackRecord, InferenceRecord, ShadowRecord
from gateway.store.spool import Spool, SpoolClaim, SpoolRecord

log = logging.getLogger(__name__)

Rejected = list[tuple[SpoolRecord, str]]


@dataclasses.dataclass(slots=True)
class WriterStats:
    queued_total: int = 0  # records accepted into the in-memory queue
    written_total: int = 0  # stored by the drain task
    spooled_total: int = 0  # appended to the spool (queue full or database down)
    replayed_total: int = 0  # stored from the spool
    queue_full_total: int = 0  # submits that found the queue full (these went to the spool)
    write_errors_total: int = 0  # failed database operations, replays and pings included
    rejected_total: int = 0  # refused by the database as invalid: in the dead letters
    spool_errors_total: int = 0  # failed spool writes (retried)
    lost_total: int = 0  # neither database nor disk would take them at close
    last_error: str | None = None
    queue_depth: int = 0
    overflow_depth: int = 0  # records waiting in memory to be spooled
    db_available: bool = True


class RecordWriter:
    """Batches inference, feedback and shadow records into a :class:`StoreBackend`."""

    def __init__(self, backend: StoreBackend, config: StoreConfig) -> None:
        self._backend = backend
        self._cfg = config
        self._queue: asyncio.Queue[SpoolRecord | None] = asyncio.Queue(config.queue_size)
        self._batch_ready = asyncio.Event()  # a full batch is queued, or close() wants it now
        self._spool = Spool(config.spool_dir, config.spool_segment_bytes)
        self._stats = WriterStats()
        self._overflow: list[SpoolRecord] = []
        self._overflow_ready = asyncio.Event()
        self._spool_ready = asyncio.Event()
        self._inflight: list[SpoolRecord] = []
        self._spool_writes: set[asyncio.Future[tuple[int, int]]] = set()
        self._db_available = True
        self._state: Literal["new", "running", "closing", "closed"] = "new"
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._closed = asyncio.Event()

    # -- public ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background tasks; replays what a previous run left in the spool."""
        if self._state != "new":
            return
        self._state = "running"
        for name, loop in (
            ("drain", self._drain_loop),
            ("overflow", self._overflow_loop),
            ("replay", self._replay_loop),
        ):
            task = asyncio.create_task(loop(), name=f"store-writer-{name}")
            task.add_done_callback(_log_death)
            self._tasks[name] = task
        self._spool_ready.set()
        if self._overflow:
            self._overflow_ready.set()

    def submit(self, record: SpoolRecord) -> None:
        """Hand a record over; returns at once, never raises, never drops."""
        if self._state == "closed":
            self._spool_now([record])
            return
        if self._state != "closing":
            try:
                self._queue.put_nowait(record)
            except asyncio.QueueFull:
                self._stats.queue_full_total += 1
            else:
                self._stats.queued_total += 1
                if self._queue.qsize() >= self._cfg.batch_size:
                    self._batch_ready.set()
                return
        self._overflow.append(record)
        self._overflow_ready.set()

    def stats(self) -> WriterStats:
        return dataclasses.replace(
            self._stats,
            queue_depth=self._queue.qsize(),
            overflow_depth=len(self._overflow),
            db_available=self._db_available,
        )

    # A deadline for the whole shutdown sequence, not for one await: hence a parameter.
    async def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:  # noqa: ASYNC109
        """Flush everything to the database or the spool, then stop (see module docstring)."""
        if self._state in ("closing", "closed"):
            await self._closed.wait()  # a concurrent close() finishes the job
            return
        await self.start()
        self._state = "closing"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        drain = self._tasks["drain"]
        try:
            async with asyncio.timeout(timeout):
                await self._queue.put(None)
        except TimeoutError:
            pass
        self._batch_ready.set()
        await asyncio.wait({drain}, timeout=max(0.0, deadline - loop.time()))
        if not drain.done():
            log.warning("record writer: close timed out after %.1fs; spooling the rest", timeout)
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        await asyncio.gather(*self._spool_writes, return_exceptions=True)
        leftovers, self._inflight = self._inflight, []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None:
                leftovers.append(item)
        leftovers += self._overflow
        self._overflow = []
        if leftovers and not await self._to_spool(leftovers):
            self._count_lost(self._overflow)
            self._overflow = []
        remaining = deadline - loop.time()
        if self._db_available and remaining > 0:
            try:
                async with asyncio.timeout(remaining):
                    await self._replay_all()
            except (StoreError, TimeoutError, OSError) as e:
                self._fail(e)
                log.warning("record writer: spool kept for the next start (%s)", e)
        self._state = "closed"  # from here on, submit() spools synchronously
        if self._overflow:  # submitted while closing, after the overflow task stopped
            self._spool_now(self._overflow)
            self._overflow = []
        await asyncio.to_thread(self._spool.close)
        self._closed.set()

    async def __aenter__(self) -> RecordWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- drain -----------------------------------------------------------------------------
    async def _drain_loop(self) -> None:
        while True:
            stop = await self._fill_batch()
            if self._inflight:
                await self._write_batch(self._inflight)
                self._inflight = []
            if stop:
                return

    async def _fill_batch(self) -> bool:
        """Collect into ``self._inflight`` (visible to close()); True when told to stop.

        After the first record, one sleep of ``flush_interval_s`` lets the batch gather, then
        the queue is drained without waiting: one wake-up per batch instead of one per record
        keeps the writer's cost on the event loop small when traffic is steady.
        """
        first = await self._queue.get()
        if first is None:
            return True
        batch = self._inflight = [first]
        if self._queue.qsize() < self._cfg.batch_size - 1:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._batch_ready.wait(), self._cfg.flush_interval_s)
        self._batch_ready.clear()
        while len(batch) < self._cfg.batch_size:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return False
            if item is None:
                return True
            batch.append(item)
        return False

    async def _write_batch(self, batch: list[SpoolRecord]) -> None:
        if self._db_available:
            try:
                written, rejected = await self._store(batch)
            except StoreUnavailable as e:
                self._mark_down(e)
            else:
                self._stats.written_total += written
                await self._reject(rejected)
                return
        self._inflight = []  # the spool write below is tracked; close() must not respool them
        await self._to_spool(batch)

    async def _store(self, records: Sequence[SpoolRecord]) -> tuple[int, Rejected]:
        """Insert; isolate the records the database refuses. Raises ``StoreUnavailable``."""
        try:
            await self._insert(records)
            return len(records), []
        except StoreUnavailable:
            raise
        except Exception as e:  # StoreDataError, or a backend bug: find the culprits
            self._fail(e)
        written, rejected = 0, []
        for record in records:
            try:
                await self._insert([record])
                written += 1
            except StoreUnavailable:
                raise
            except Exception as e:  # keep it aside with the reason; the rest is stored
                rejected.append((record, f"{type(e).__name__}: {e}"))
        return written, rejected

    async def _insert(self, records: Sequence[SpoolRecord]) -> None:
        # Parents first, so a reader never sees feedback whose inference is still missing.
        inferences = [r for r in records if isinstance(r, InferenceRecord)]
        shadows = [r for r in records if isinstance(r, ShadowRecord)]
        feedback = [r for r in records if isinstance(r, FeedbackRecord)]
        await self._backend.insert_inferences(inferences)
        await self._backend.insert_shadows(shadows)
        await self._backend.insert_feedback(feedback)

    # -- spool -----------------------------------------------------------------------------
    async def _to_spool(self, records: list[SpoolRecord]) -> bool:
        """Append to the spool; on a disk error keep them in the overflow list, return False.

        The write is a tracked future whose outcome is accounted for in a callback, so a caller
        cancelled meanwhile (close() stopping a task) neither loses nor double-counts records;
        close() waits for every tracked write before its final replay.
        """
        write = asyncio.ensure_future(asyncio.to_thread(self._spool.append, records))
        self._spool_writes.add(write)
        write.add_done_callback(lambda done: self._spool_written(records, done))
        try:
            await asyncio.shield(write)
        except Exception:  # accounted for by _spool_written: records are back in the overflow
            return False
        return True

    def _spool_written(
        self, records: list[SpoolRecord], write: asyncio.Future[tuple[int, int]]
    ) -> None:
        self._spool_writes.discard(write)
        error = asyncio.CancelledError() if write.cancelled() else write.exception()
        if error is None:
            spooled, rejected = write.result()
            self._stats.spooled_total += spooled
            self._stats.rejected_total += rejected
            self._spool_ready.set()
            return
        self._stats.spool_errors_total += 1
        self._fail(error)
        log.error("record writer: cannot spool %d records: %s", len(records), error)
        self._overflow[:0] = records
        self._overflow_ready.set()  # the overflow task retries, with back-off

    def _spool_now(self, records: list[SpoolRecord]) -> None:
        """After close: spool synchronously (blocking, but nothing else is running)."""
        try:
            spooled, rejected = self._spool.append(records)
            self._spool.seal()
        except OSError as e:
            self._fail(e)
            self._count_lost(records)
            return
        self._stats.spooled_total += spooled
        self._stats.rejected_total += rejected

    async def _overflow_loop(self) -> None:
        backoff = self._cfg.retry_initial_s
        while True:
            await self._overflow_ready.wait()
            self._overflow_ready.clear()
            records, self._overflow = self._overflow, []
            if not records or await self._to_spool(records):
                backoff = self._cfg.retry_initial_s
                continue
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._cfg.retry_max_s)

    async def _reject(self, rejected: Rejected) -> None:
        if not rejected:
            return
        self._stats.rejected_total += len(rejected)
        log.warning("record writer: %d records refused by the database", len(rejected))
        try:
            await asyncio.to_thread(self._spool.dead_letter, rejected)
        except OSError as e:
            self._fail(e)
            self._count_lost([r for r, _ in rejected])

    # -- replay ----------------------------------------------------------------------------
    async def _replay_loop(self) -> None:
        backoff = self._cfg.retry_initial_s
        while True:
            await self._spool_ready.wait()
            self._spool_ready.clear()
            try:
                await self._replay_all()
            except StoreUnavailable as e:
                self._mark_down(e)
            except (StoreError, OSError) as e:
                self._fail(e)
                log.error("record writer: replay failed: %s", e)
            else:
                backoff = self._cfg.retry_initial_s
                continue
            self._spool_ready.set()
            await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
            backoff = min(backoff * 2, self._cfg.retry_max_s)

    async def _replay_all(self) -> None:
        """Ping, then store every spool segment this process can claim."""
        await self._backend.ping()
        if not self._db_available:
            log.info("record writer: database reachable again; replaying the spool")
        self._db_available = True
        await asyncio.to_thread(self._spool.seal)
        for path in await asyncio.to_thread(self._spool.segments):
            claim = await asyncio.to_thread(self._spool.claim, path)
            if claim is None:
                continue
            try:
                await self._replay_claim(claim)
            finally:
                claim.release()

    async def _replay_claim(self, claim: SpoolClaim) -> None:
        written, rejected = 0, []
        size = self._cfg.batch_size
        for start in range(0, len(claim.records), size):
            ok, refused = await self._store(claim.records[start : start + size])
            written += ok
            rejected += refused
        await self._reject(rejected)
        if claim.bad_lines:
            self._stats.rejected_total += len(claim.bad_lines)
            await asyncio.to_thread(self._spool.dead_letter, claim.bad_lines)
        await asyncio.to_thread(claim.remove)
        self._stats.replayed_total += written

    # -- bookkeeping -----------------------------------------------------------------------
    def _fail(self, e: BaseException) -> None:
        self._stats.write_errors_total += 1
        self._stats.last_error = f"{type(e).__name__}: {e}"

    def _mark_down(self, e: StoreUnavailable) -> None:
        self._fail(e)
        if self._db_available:
            log.warning("record writer: database unavailable, spooling: %s", e)
        self._db_available = False

    def _count_lost(self, records: Sequence[SpoolRecord]) -> None:
        if records:
            self._stats.lost_total += len(records)
            log.critical("record writer: %d records lost (no database, no disk)", len(records))


def _log_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("record writer task %s died", task.get_name(), exc_info=task.exception())
