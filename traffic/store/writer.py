"""The record writer: gets traffic records into the store off the request path, losing none.

Flow of a record::

    submit() ──> bounded asyncio.Queue ──> drain task: batches of batch_size, or whatever came
       │                                   within flush_interval_s ──> backend inserts
       │ queue full                             │ database unreachable          │ record refused
       v                                        v                               v
    overflow list ──> overflow task ──────> spool (JSON lines, ──────────────> dead letters
                                            fsync'd, on disk)   not encodable   (with reasons)
                                                │
    replay task: when something was spooled (and at start), ping the database with exponential
    back-off (retry_initial_s .. retry_max_s, jittered); once it answers, replay every segment in
    batches, deleting each once all of it is stored (:mod:`traffic.store.writer_replay`);
    :meth:`RecordWriter.replay_spool` asks for a pass when another process appended to the spool.

Policy: the database, else the spool, else the dead letters with the reason; never a silent drop.
- ``submit(record)``: synchronous, O(1), never blocks or raises; call it on the loop's thread.
  A full queue spools the record (``queue_full_total``): memory is saved by disk, never by drops.
- While the database is unreachable (``StoreUnavailable``) batches go straight to the spool;
  inserts are idempotent by id, so a batch both stored and spooled (a timed-out insert) lands once.
- A record the database refuses (``StoreDataError`` or any exception but ``StoreUnavailable``:
  nesting past the encoder's recursion limit, NaN, lone surrogates) or the spool cannot encode is
  isolated from its batch and dead-lettered (``rejected_total``; kind, id, time and a bounded
  sketch when it cannot be kept whole: :mod:`traffic.store.spool`).
- A spool that cannot be written (disk full) leaves the records in memory, retried with back-off
  (``spool_errors_total``); only once :meth:`close` gives up on database and disk are they, and
  dead letters the disk refuses, counted in ``lost_total`` (logged at CRITICAL).
- Each task is supervised: a bug (an unexpected exception) is counted (``faults_total``), logged,
  and the task restarts after retry_initial_s doubling to retry_max_s (``restarts_total``); the
  drain's batch in hand is spooled, a replayed segment stays. :attr:`healthy` (``/ready``) is false
  unless running, while a task is dead, or while ``FAULT_BURST`` faults fall in ``FAULT_WINDOW_S``.

``close(timeout)`` drains the queue (database, else spool), spools the overflow, then replays the
spool if the database is up and time is left; the rest waits in the spool for the next start.
The writer does not own the backend: close the backend after it. :meth:`stats`: totals since
start. ``on_settled`` (optional) gets the records the writer is done with (stored, spooled,
dead-lettered or lost; not replays: settled when spooled): what a process feeding the writer
through a pipe (:mod:`gateway.recording.process`) may forget.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Literal

from traffic.store.backend import StoreBackend
from traffic.store.config import DEFAULT_CLOSE_TIMEOUT_S, StoreConfig
from traffic.store.errors import StoreDataError, StoreError, StoreUnavailable
from traffic.store.records import FeedbackRecord, InferenceRecord, ShadowRecord
from traffic.store.spool import Spool, SpoolRecord
from traffic.store.writer_replay import replay_spool
from traffic.store.writer_stats import Rejected, WriterStats

__all__ = ["RecordWriter", "Settled", "WriterStats"]

log = logging.getLogger(__name__)

Settled = Callable[[Sequence[SpoolRecord]], None]

FAULT_WINDOW_S: Final = 60.0  # faults this recent count against health ...
FAULT_BURST: Final = 3  # ... this many of them make the writer unhealthy
_ERROR_CHARS: Final = 1000


class RecordWriter:
    """Batches inference, feedback and shadow records into a :class:`StoreBackend`."""

    def __init__(
        self, backend: StoreBackend, config: StoreConfig, on_settled: Settled | None = None
    ) -> None:
        self._backend = backend
        self._on_settled = on_settled
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
        self._backing_off: set[str] = set()  # tasks waiting to restart after a fault
        self._faults: deque[float] = deque(maxlen=FAULT_BURST)  # when the last ones fell
        self._drain_stopped = False  # the drain task took close()'s stop sentinel
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
            task = asyncio.create_task(self._supervise(name, loop), name=f"store-writer-{name}")
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

    def flush(self) -> None:
        """Write what is queued now instead of waiting out ``flush_interval_s`` for more (the
        writer process, when the bytes it holds unacknowledged grow large)."""
        self._batch_ready.set()

    def replay_spool(self) -> None:
        """Have the replay task look at the spool now: another process sharing it (the gateway
        feeding this writer, :mod:`gateway.recording.process`) appended to it."""
        self._spool_ready.set()

    def stats(self) -> WriterStats:
        return dataclasses.replace(
            self._stats,
            queue_depth=self._queue.qsize(),
            overflow_depth=len(self._overflow),
            db_available=self._db_available,
            tasks_alive=self._tasks_alive(),
            healthy=int(self.healthy),
        )

    @property
    def healthy(self) -> bool:
        """Running, no task dead, and no burst of faults (``FAULT_BURST`` in ``FAULT_WINDOW_S``).

        One fault and its restart leave the writer healthy: a single bad moment must not take
        the gateway out of rotation; a task that keeps failing, or is dead, does.
        """
        if self._state != "running" or any(t.done() for t in self._tasks.values()):
            return False
        faults = self._faults
        return len(faults) < FAULT_BURST or time.monotonic() - faults[0] >= FAULT_WINDOW_S

    def _tasks_alive(self) -> int:
        return sum(1 for n, t in self._tasks.items() if not t.done() and n not in self._backing_off)

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
            except Exception as e:  # a bug: the spool stays for the next start
                self._fault("close", e)
        self._state = "closed"  # from here on, submit() spools synchronously
        if self._overflow:  # submitted while closing, after the overflow task stopped
            self._spool_now(self._overflow)
            self._overflow = []
        try:
            await asyncio.to_thread(self._spool.close)
        except OSError as e:
            self._fail(e)
        finally:
            self._closed.set()

    async def __aenter__(self) -> RecordWriter:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- supervision -----------------------------------------------------------------------
    async def _supervise(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run ``body`` until it returns; after a fault, rescue its records, back off, rerun."""
        backoff = self._cfg.retry_initial_s
        while True:
            started = time.monotonic()
            try:
                await body()
                return
            except Exception as e:  # a bug, whatever it is: the writer must outlive it
                self._fault(name, e)
            if name == "drain":
                records, self._inflight = self._inflight, []
                self._overflow += records  # to the spool; replays are idempotent by id
                if records:
                    self._overflow_ready.set()
                if self._drain_stopped:
                    return
            if time.monotonic() - started > self._cfg.retry_max_s:
                backoff = self._cfg.retry_initial_s  # it had been working: a fresh fault
            self._backing_off.add(name)
            try:
                await asyncio.sleep(backoff * random.uniform(0.5, 1.0))
            finally:
                self._backing_off.discard(name)
            backoff = min(backoff * 2, self._cfg.retry_max_s)
            self._stats.restarts_total += 1
            log.warning("record writer: restarting the %s task", name)
            self._spool_ready.set()  # the replay task looks again at what was left on disk

    def _fault(self, where: str, e: Exception) -> None:
        self._stats.faults_total += 1
        self._stats.last_error = f"{type(e).__name__}: {e}"[:_ERROR_CHARS]
        self._faults.append(time.monotonic())
        log.error("record writer: unexpected error in %s", where, exc_info=e)

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
            self._drain_stopped = True
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
                self._drain_stopped = True
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
                self._settled(batch)
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
        if len(inferences) + len(shadows) + len(feedback) < len(records):  # a caller's bug
            raise StoreDataError("not an inference, feedback or shadow record")
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
            self._settled(records)
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
        except Exception as e:  # a disk error, or a bug: submit() must not raise either way
            self._fail(e)
            self._count_lost(records)
            return
        self._stats.spooled_total += spooled
        self._stats.rejected_total += rejected
        self._settled(records)

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
        except Exception as e:  # the disk refuses (OSError), or a bug: they have nowhere to go
            if not isinstance(e, OSError):
                self._fault("dead letters", e)
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
        cfg = self._cfg
        await replay_spool(self._spool, self._store, self._reject, cfg.batch_size, self._stats)

    # -- bookkeeping -----------------------------------------------------------------------
    def _fail(self, e: BaseException) -> None:
        self._stats.write_errors_total += 1
        self._stats.last_error = f"{type(e).__name__}: {e}"[:_ERROR_CHARS]

    def _mark_down(self, e: StoreUnavailable) -> None:
        self._fail(e)
        if self._db_available:
            log.warning("record writer: database unavailable, spooling: %s", e)
        self._db_available = False

    def _count_lost(self, records: Sequence[SpoolRecord]) -> None:
        if records:
            self._stats.lost_total += len(records)
            log.critical("record writer: %d records lost (no database, no disk)", len(records))
            self._settled(records)

    def _settled(self, records: Sequence[SpoolRecord]) -> None:
        if self._on_settled is None or not records:
            return
        try:
            self._on_settled(records)
        except Exception as e:  # the listener's bug must not stop the writer
            self._fault("on_settled", e)


def _log_death(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("record writer task %s died", task.get_name(), exc_info=task.exception())
