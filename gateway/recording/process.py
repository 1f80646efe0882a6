"""The record writer in its own process: the serving loop hands drafts to a pipe, the writer
process assembles, encodes and stores them, scheduled after everything that serves.

Why a process: recording is Python work, which in the serving process held the GIL that every
request needs (a thread would too). The loop keeps a draft (:mod:`gateway.recording.draft`: what it
already holds) and every ``store.flush_interval_s`` or ``store.batch_size`` drafts (each write
wakes the child) pickles the batch to the child's stdin without blocking, in one write
(``child.PIPE_BYTES``); the child stores over a longer window (``store.process_flush_interval_s``).

Why last (``child.yield_to_serving``: ``SCHED_IDLE``, every thread): the work is moved, not
removed. A core running only ``SCHED_IDLE`` threads counts as idle, so the processes that serve
wake where the child works instead of preempting the serving loop; the child yields every few
records (:mod:`traffic.store.yielding`) for kernels that do not preempt on wake-up, and what it
cannot write under load it writes when the load eases, within the bound below. Figures, and what
was tried and not kept: docs/recording.md ("What recording cost the serving process", and above).

Bounded: at most ``store.queue_size`` records, and ``store.queue_bytes`` of their frames, are in
flight (sent, not acknowledged; a single batch goes whatever its size when nothing is); beyond, the
gateway spools them itself, on a thread (building the records there: costly, but only while the
child is that far behind), and asks the child to replay the spool (a ``REPLAY`` frame).

Protocol (each way a 4-byte little-endian length, then a pickle; the gateway's has its large bytes
beside it, :class:`Batch`; the child's side is :mod:`gateway.recording.child`)::

    gateway ──stdin──> (seq, [draft tuple | InferenceRecord | FeedbackRecord | ShadowRecord])
                       (REPLAY, [])  the gateway appended to the spool: replay it now
            <─stdout── ("stats", {WriterStats fields}) every child.STATS_INTERVAL_S
                       ("ack", [seq, ...])  every record of those batches stored, spooled,
                                            dead-lettered (or counted lost at close)
    EOF on stdin: the child drains its writer (to the database or spool), sends last stats, exits.

Guarantees, the in-process writer's (:mod:`traffic.store.writer`, which the child runs as is):
nothing lost (every batch is kept until acknowledged; a dead child is replaced and sent them
again, inserts being idempotent by id; a child that never reported, or a failed spawn, gives way
to the in-process writer, which takes them); ``close()`` flushes, waits ``close_timeout`` for the
child to drain, then kills it and spools here what it did not acknowledge; feedback finds ids
just submitted (:class:`~gateway.recording.handle.RecorderHandle`); one child per gateway process
(each worker of ``--workers N``). ``store.writer_process: false``, or an in-memory SQLite
database (another process cannot open it), keeps the writer in the gateway process.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import pickle
import struct
import sys
import time
from collections.abc import Sequence
from typing import Any, Final

from gateway.recording.draft import InferenceDraft, Item, as_record, from_wire, to_wire
from traffic.store import RecordWriter, StoreBackend, StoreConfig
from traffic.store.config import DEFAULT_CLOSE_TIMEOUT_S
from traffic.store.spool import Spool
from traffic.store.writer import WriterStats

log = logging.getLogger(__name__)

FRAME: Final = struct.Struct("<I")  # a frame's length, either way
LAYOUT: Final = struct.Struct("<II")  # a batch frame's pickle length and buffer count (Batch)
REPLAY: Final = 0  # the seq of a frame that carries no records: "replay the spool now"
START_GRACE_S: Final = 15.0  # healthy while a fresh child has not reported yet
STALE_STATS_S: Final = 10.0  # a child silent this long is unhealthy
RESTART_BACKOFF_S: Final = (0.1, 0.5, 2.0, 5.0)
CLOSE_MARGIN_S: Final = 5.0  # beyond the store's close timeout, for the child to exit
# The longest close() takes at the store's default close timeout (gateway.app.stop_deadline_s).
CLOSE_DEADLINE_S: Final = DEFAULT_CLOSE_TIMEOUT_S + CLOSE_MARGIN_S


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """One frame to the writer process, as the gateway keeps it until acknowledged: the batch's
    pickle, and the large bytes it refers to out of band (a long stream's raw blocks, a large
    client body: :data:`~gateway.recording.draft.OUT_OF_BAND_BYTES`), which go to the pipe as they
    are, never copied into the pickle.

    On the pipe, after the frame's length (:data:`FRAME`): :data:`LAYOUT` (the pickle's length,
    the number of buffers), each buffer's length (``<I``), the pickle, the buffers.

    Why out of band: a long stream's raw bytes (~67 KB for 256 tokens) pickled into the frame
    made each batch a fresh copy in new pages, every one of them faulted in on the serving loop
    and pushed through its core's cache (docs/recording.md, "Long streams, and the bytes that go
    beside the pickle")."""

    layout: bytes
    pickled: bytes
    buffers: tuple[bytes | memoryview, ...]

    @property
    def size(self) -> int:
        """The frame's bytes after its length."""
        return len(self.layout) + len(self.pickled) + sum(map(len, self.buffers))

    def parts(self) -> tuple[bytes | memoryview, ...]:
        """What the pipe carries after the frame's length."""
        return (self.layout, self.pickled, *self.buffers)

    def payload(self) -> bytes:
        """The frame after its length, in one piece (:func:`decode_batch` reads it)."""
        return b"".join(self.parts())


def encode_batch(seq: int, items: Sequence[Item]) -> Batch:
    """One frame: drafts as plain tuples (:func:`~gateway.recording.draft.to_wire`), whose large
    bytes are marked to travel out of band.

    The frame goes in one vectored write (:meth:`WriterProcess._send`), its parts never joined:
    a joined copy, in freshly mapped pages each time, cost the serving loop as much as the
    pickling itself (docs/recording.md, "What the serving loop pays a frame")."""
    wire = [to_wire(i) if isinstance(i, InferenceDraft) else i for i in items]
    buffers: list[bytes | memoryview] = []

    def aside(buffer: pickle.PickleBuffer) -> None:
        view = buffer.raw()  # the bytes themselves where they are bytes: no object more
        buffers.append(view.obj if type(view.obj) is bytes else view)

    pickled = pickle.dumps((seq, wire), protocol=5, buffer_callback=aside)
    lengths = [len(b) for b in buffers]
    layout = LAYOUT.pack(len(pickled), len(lengths)) + struct.pack(f"<{len(lengths)}I", *lengths)
    return Batch(layout, pickled, tuple(buffers))


def decode_batch(payload: bytes) -> tuple[int, list[Item]]:
    """A frame's ``(seq, items)``, its length taken off (:class:`Batch`); the out-of-band
    buffers come back as ``bytes``."""
    size, count = LAYOUT.unpack_from(payload)
    at = LAYOUT.size + 4 * count
    lengths = struct.unpack_from(f"<{count}I", payload, LAYOUT.size)
    pickled = memoryview(payload)[at : at + size]
    at += size
    buffers = []
    for n in lengths:
        buffers.append(payload[at : at + n])
        at += n
    seq, wire = pickle.loads(pickled, buffers=buffers)
    return seq, [from_wire(i) if type(i) is tuple else i for i in wire]


# -- the gateway's side ---------------------------------------------------------------------
class WriterProcess:
    """The gateway's handle on its writer process; the surface of :class:`RecordWriter`
    (``submit``, ``stats``, ``healthy``, ``close``) for
    :class:`gateway.recording.handle.RecorderHandle`.

    ``backend`` (connected by the caller) serves the in-process fallback writer, when no
    process can run."""

    def __init__(self, config: StoreConfig, backend: StoreBackend) -> None:
        self._cfg = config
        self._backend = backend
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._local: RecordWriter | None = None  # the fallback, once it took over
        self._pending: list[Item] = []
        self._late: list[Item] = []  # submitted while closing
        self._timer: asyncio.TimerHandle | None = None
        self._seq = 0
        # Each batch sent and not yet acknowledged, as its frame: bytes and buffers, which the
        # garbage collector does not traverse (the drafts themselves die at the pipe write).
        self._unacked: dict[int, tuple[int, Batch]] = {}
        self._in_flight = 0  # records in _unacked; at most store.queue_size
        self._in_flight_bytes = 0  # their frames' bytes; at most store.queue_bytes (but one)
        self._spooling: set[asyncio.Future[None]] = set()  # overflow spooled here, on threads
        self._spooled_here = 0
        self._behind = False  # overflowing to the spool since the last catch-up
        self._child_stats: dict[str, Any] = {}
        self._reported = False  # the current child has sent stats
        self._spawned_at = 0.0
        self._last_report = 0.0
        self._restarts = 0
        self._closing = False
        self._closed = False

    # -- public ----------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the child; if it cannot start, the in-process writer."""
        if not await self._spawn():
            await self._fall_back()

    def submit(self, item: Item) -> None:
        """Hand a record over; returns at once, never raises, never drops."""
        if self._local is not None:
            self._local.submit(as_record(item))
            return
        if self._closing:  # the pipe is closing: spooled here, now or at the end of close()
            if self._closed:
                self._spool_here([item])
            else:
                self._late.append(item)
            return
        self._pending.append(item)
        if len(self._pending) >= self._cfg.batch_size:
            self._flush()
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._cfg.flush_interval_s, self._flush)

    @property
    def in_process(self) -> bool:
        """True once the in-process fallback writes."""
        return self._local is not None

    @property
    def healthy(self) -> bool:
        if self._local is not None:
            return self._local.healthy
        if self._closing or self._proc is None or self._proc.returncode is not None:
            return False
        now = time.monotonic()
        if not self._reported:
            return now - self._spawned_at < START_GRACE_S
        return bool(self._child_stats.get("healthy")) and now - self._last_report < STALE_STATS_S

    def stats(self) -> WriterStats:
        """The child's last figures; ``queue_depth`` counts every record not yet settled
        (waiting here, in the pipe or in the child)."""
        if self._local is not None:
            stats = self._local.stats()
        else:
            known = {f.name for f in dataclasses.fields(WriterStats)}
            stats = WriterStats(**{k: v for k, v in self._child_stats.items() if k in known})
        waiting = len(self._pending) + self._in_flight
        return dataclasses.replace(
            stats,
            queue_depth=stats.queue_depth + waiting,
            spooled_total=stats.spooled_total + self._spooled_here,
            restarts_total=stats.restarts_total + self._restarts,
            healthy=int(self.healthy),
        )

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Flush, let the child drain and exit; what it did not settle is spooled here."""
        if self._closing:
            return
        self._closing = True
        timeout = DEFAULT_CLOSE_TIMEOUT_S if timeout is None else timeout
        self._flush()
        if self._spooling:  # before the pipe closes: the child's last replay finds them
            await asyncio.gather(*self._spooling, return_exceptions=True)
        if self._local is not None:
            await self._local.close(timeout)
            self._closed = True
            return
        proc = self._proc
        if proc is not None and proc.stdin is not None:
            proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), timeout + CLOSE_MARGIN_S)
            except TimeoutError:
                log.error("record writer process did not exit in time; killing it")
                proc.kill()
                await proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._closed = True
        leftovers = self._take_unacked() + self._late
        self._late = []
        if leftovers:
            log.warning("record writer: spooling %d records the process left", len(leftovers))
            await asyncio.to_thread(self._spool_here, leftovers)

    # -- the pipe --------------------------------------------------------------------------
    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, self._pending = self._pending, []
        if not items:
            return
        if self._local is not None:  # the fallback took over meanwhile
            for item in items:
                self._local.submit(as_record(item))
            return
        if self._in_flight and self._in_flight_bytes >= self._cfg.queue_bytes:
            self._fall_behind(items)  # no room by bytes whatever this batch's size: no encode
            return
        room = max(self._cfg.queue_size - self._in_flight, 0)
        if len(items) > room:  # the child is that far behind: the rest waits on disk
            self._fall_behind(items[room:])
            items = items[:room]
            if not items:
                return
        self._seq += 1
        try:
            batch = encode_batch(self._seq, items)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            items = self._set_aside_unpicklable(items)
            batch = encode_batch(self._seq, items)
        size = FRAME.size + batch.size  # as the child counts it (child._Acks)
        if self._in_flight and self._in_flight_bytes + size > self._cfg.queue_bytes:
            # Long answers (a 256-token stream is ~50 KB of raw bytes) fill memory long before
            # queue_size records do: the batch waits on disk instead (a batch always goes when
            # nothing is in flight, however large).
            self._seq -= 1
            self._fall_behind(items)
            return
        self._unacked[self._seq] = (len(items), batch)
        self._in_flight += len(items)
        self._in_flight_bytes += size
        self._send(batch)

    def _fall_behind(self, items: list[Item]) -> None:
        if not self._behind:
            self._behind = True
            log.warning("record writer: the writer process is behind; spooling here")
        self._spool_aside(items)

    def _spool_aside(self, items: list[Item]) -> None:
        """Spool ``items`` here, on a thread (close() waits for it), then have the child
        replay the spool."""
        self._spooled_here += len(items)
        spooled = asyncio.get_running_loop().run_in_executor(None, self._spool_here, items)
        self._spooling.add(spooled)
        spooled.add_done_callback(self._spooled_aside)

    def _spooled_aside(self, spooled: asyncio.Future[None]) -> None:
        self._spooling.discard(spooled)
        self._send(encode_batch(REPLAY, []))

    def _set_aside_unpicklable(self, items: list[Item]) -> list[Item]:
        """A bug's way out (a draft holding a closure): what will not pickle is built and
        spooled here, on a thread; the rest goes to the child."""
        good, bad = [], []
        for item in items:
            try:
                pickle.dumps(item, protocol=5)
            except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
                bad.append(item)
            else:
                good.append(item)
        log.error("record writer: %d records do not pickle; spooled by the gateway", len(bad))
        self._spool_aside(bad)
        return good

    def _send(self, batch: Batch) -> None:
        """One frame: its length, then its parts, in one vectored write where the pipe has
        room (the transport writes every buffer as it is)."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return  # kept in _unacked: sent to the next child, or to the fallback
        if proc.stdin.is_closing():
            return  # closing: what is in _unacked is spooled at the end of close()
        proc.stdin.writelines((FRAME.pack(batch.size), *batch.parts()))

    def _take_unacked(self) -> list[Item]:
        """Every item not yet acknowledged, in the order submitted; forgotten here."""
        items: list[Item] = []
        for seq in sorted(self._unacked):
            items += decode_batch(self._unacked[seq][1].payload())[1]
        self._unacked.clear()
        self._in_flight = 0
        self._in_flight_bytes = 0
        return items

    async def _spawn(self) -> bool:
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway.recording.accel",  # its compiled modules, where built
                "run",
                "gateway.recording.child",
                self._cfg.model_dump_json(include=set(StoreConfig.model_fields)),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
        except OSError as e:
            log.error("record writer process cannot start: %s", e)
            return False
        self._proc = proc
        self._reported = False
        self._spawned_at = time.monotonic()
        self._reader = asyncio.create_task(self._read(proc), name="store-writer-process")
        for seq in sorted(self._unacked):  # a new child: everything not yet settled
            self._send(self._unacked[seq][1])
        return True

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                head = await proc.stdout.readexactly(FRAME.size)
                (size,) = FRAME.unpack(head)
                kind, value = pickle.loads(await proc.stdout.readexactly(size))
                if kind == "stats":
                    self._child_stats = value
                    self._reported = True
                    self._last_report = time.monotonic()
                elif kind == "ack":
                    for seq in value:
                        done = self._unacked.pop(seq, None)
                        if done is not None:
                            self._in_flight -= done[0]
                            self._in_flight_bytes -= FRAME.size + done[1].size
                    if (
                        self._behind
                        and self._in_flight <= self._cfg.queue_size // 2
                        and self._in_flight_bytes <= self._cfg.queue_bytes // 2
                    ):
                        self._behind = False
                        log.info("record writer: the writer process caught up")
        except asyncio.IncompleteReadError:
            pass
        await proc.wait()
        if self._closing:
            return
        log.error("record writer process exited (code %s)", proc.returncode)
        await self._recover(self._reported)

    async def _recover(self, had_worked: bool) -> None:
        """A child died: start another, or (it never worked here) the in-process writer."""
        self._proc = None
        if had_worked and self._restarts < len(RESTART_BACKOFF_S):
            await asyncio.sleep(RESTART_BACKOFF_S[self._restarts])
            self._restarts += 1
            if not self._closing and await self._spawn():
                return
        if not self._closing:
            await self._fall_back()

    async def _fall_back(self) -> None:
        log.warning("record writer: writing from the gateway process (no writer process)")
        local = RecordWriter(self._backend, self._cfg)
        await local.start()
        self._local = local
        for item in self._take_unacked():
            local.submit(as_record(item))
        self._flush()

    def _spool_here(self, items: Sequence[Item]) -> None:
        """Blocking: after close, or for what a killed child left."""
        spool = Spool(self._cfg.spool_dir, self._cfg.spool_segment_bytes)
        try:
            spool.append([as_record(i) for i in items])
            spool.seal()
        except OSError as e:
            log.critical("record writer: %d records lost (no process, no disk): %s", len(items), e)
        finally:
            spool.close()
