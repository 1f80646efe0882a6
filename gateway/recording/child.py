"""The record writer process's side of :mod:`gateway.recording.process`: it reads drafts from
stdin, assembles and stores them with the in-process writer (:class:`traffic.store.RecordWriter`)
and reports stats and acknowledgements on stdout (the protocol is described there).

Started as ``python -m gateway.recording.accel run gateway.recording.child '<StoreConfig JSON>'`` by
:class:`~gateway.recording.process.WriterProcess` (the assemblers' compiled build loaded first,
where it is built and current: :mod:`gateway.recording.accel`); split from it so that each side is
one module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import gc
import logging
import os
import pickle
import signal
import sys
from collections.abc import Sequence
from typing import Final

from gateway.memory_trim import keep_freed_heap
from gateway.recording.draft import as_record
from gateway.recording.process import CLOSE_MARGIN_S, FRAME, REPLAY, decode_batch
from traffic.store import RecordWriter, StoreConfig, StoreError, open_store
from traffic.store.spool import SpoolRecord
from traffic.store.yielding import WRITER_YIELD_EVERY, slices

log = logging.getLogger(__name__)

STATS_INTERVAL_S: Final = 0.25
# Where SCHED_IDLE is not available: the child's niceness (docs/recording.md).
WRITER_NICE: Final = 19
PIPE_BYTES: Final = 1 << 20  # the stdin pipe's capacity: a batch's frame in one write
CHILD_GC_GEN0: Final = 20_000  # ~100 container objects per streamed record die within its batch
# A batch's frame (~5 KB a short stream) comes from the heap and is freed there for the next
# one, instead of being mapped, faulted in and given back each batch (gateway.memory_trim).
HEAP_MMAP_BYTES: Final = 16 << 20
HEAP_TRIM_BYTES: Final = 32 << 20
# A batching window (store.process_flush_interval_s) ends early while the frames not yet
# acknowledged hold this share of store.queue_bytes.
HELD_SHARE: Final = 4


class _Acks:
    """Which batch each record came in; a batch is acknowledged when all of it settled.
    ``held``: the bytes of the frames not yet acknowledged, as the gateway counts them against
    ``store.queue_bytes``."""

    def __init__(self) -> None:
        self.batch_of: dict[str, int] = {}
        self.left: dict[int, int] = {}
        self.size: dict[int, int] = {}
        self.held = 0
        self.done: list[int] = []

    def expect(self, seq: int, records: Sequence[SpoolRecord], size: int) -> None:
        self.left[seq] = self.left.get(seq, 0) + len(records)
        self.size[seq] = self.size.get(seq, 0) + size
        self.held += size
        for r in records:
            self.batch_of[r.id] = seq

    def settled(self, records: Sequence[SpoolRecord]) -> None:
        for r in records:
            seq = self.batch_of.pop(r.id, None)
            if seq is None:
                continue
            self.left[seq] -= 1
            if not self.left[seq]:
                del self.left[seq]
                self.held -= self.size.pop(seq)
                self.done.append(seq)


class _PipeClosed(asyncio.Protocol):
    def __init__(self, closed: asyncio.Future[None]) -> None:
        self._closed = closed

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._closed.done():
            self._closed.set_result(None)


async def _child(config: StoreConfig, out_fd: int) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=2**26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = os.fdopen(out_fd, "wb", buffering=0)
    closed = loop.create_future()
    transport, _ = await loop.connect_write_pipe(lambda: _PipeClosed(closed), out)

    def send(kind: str, value: object) -> None:
        data = pickle.dumps((kind, value), protocol=5)
        transport.write(FRAME.pack(len(data)) + data)

    acks = _Acks()
    backend = open_store(config, yield_every=WRITER_YIELD_EVERY)
    try:
        await backend.connect()
    except StoreError as e:
        log.error("traffic store unreachable, spooling until it returns: %s", e)
    # Its own batching window (store.process_flush_interval_s): each transaction, its thread
    # hand-off and its wake-ups cost this process the same whatever the batch's size.
    batching = config.model_copy(update={"flush_interval_s": config.process_flush_interval_s})
    writer = RecordWriter(backend, batching, on_settled=acks.settled)
    await writer.start()
    gc.collect()  # what start-up left (imports, the schema) never dies: out of the collector's way
    gc.freeze()
    # Started (connected, migrated) at the gateway's priority; from here on, serving comes first.
    log.info("record writer process scheduled %s", yield_to_serving())

    def report() -> None:
        if acks.done:
            send("ack", acks.done)
            acks.done = []
        send("stats", dataclasses.asdict(writer.stats()))

    async def reporter() -> None:
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            report()

    task = asyncio.create_task(reporter())
    try:
        while True:
            try:
                head = await reader.readexactly(FRAME.size)
            except asyncio.IncompleteReadError:
                break  # the gateway closed the pipe: drain and exit
            (size,) = FRAME.unpack(head)
            seq, items = decode_batch(await reader.readexactly(size))
            if seq == REPLAY:
                writer.replay_spool()
                continue
            records = [as_record(i) for part in slices(items, WRITER_YIELD_EVERY) for i in part]
            acks.expect(seq, records, FRAME.size + size)
            for record in records:
                writer.submit(record)
            if acks.held >= config.queue_bytes // HELD_SHARE:
                # The gateway keeps these frames until acknowledged, within store.queue_bytes:
                # a window of long answers is written early, before the gateway must spool.
                writer.flush()
            if acks.done:
                report()
            # A backlog in the pipe reads without a pause: let the writer and the reporter in.
            await asyncio.sleep(0)
    finally:
        task.cancel()
        await writer.close()
        await backend.close()
        report()
        transport.close()  # after what is buffered went out: the last acks must arrive
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(closed, CLOSE_MARGIN_S)


def yield_to_serving() -> str:
    """Schedule every thread of this process, and those its threads start later (they inherit
    it), after the serving processes: ``SCHED_IDLE`` on Linux, else :data:`WRITER_NICE`.

    Every thread: a policy or a niceness set the usual way (``os.nice``) applies to the
    calling thread only, and the store's SQLite thread, started at connect, kept the gateway's
    priority. Why ``SCHED_IDLE`` rather than a niceness: the kernel counts a core that runs
    only such threads as idle when it places a waking task, so the processes that serve (the
    gateway's loop, and on a small box its upstreams and clients) wake onto the core where this
    one works and push it aside, instead of onto the serving loop's core, which they preempted
    (figures: docs/recording.md, "Where the child runs")."""
    tasks = "/proc/self/task"
    tids = [int(t) for t in os.listdir(tasks)] if os.path.isdir(tasks) else []
    idle = getattr(os, "SCHED_IDLE", None)
    if idle is not None and tids:
        try:
            for tid in tids:
                os.sched_setscheduler(tid, idle, os.sched_param(0))
            return "SCHED_IDLE"
        except OSError:  # refused (a seccomp profile): the nicest niceness instead
            pass
    for tid in tids or [0]:
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, WRITER_NICE)
    return f"at nice {WRITER_NICE}"


def main() -> None:
    """``python -m gateway.recording.child '<StoreConfig JSON>'`` (the gateway starts it, through
    ``python -m gateway.recording.accel run``)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    config = StoreConfig.model_validate_json(sys.argv[1])
    # The gateway decides when this process ends (EOF on stdin, after the last record): a
    # Ctrl-C or SIGTERM sent to the whole process group must not cut its drain short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    gc.set_threshold(CHILD_GC_GEN0, 20, 20)
    keep_freed_heap(HEAP_MMAP_BYTES, HEAP_TRIM_BYTES)
    with contextlib.suppress(OSError):  # a smaller pipe only means more, smaller writes
        fcntl.fcntl(sys.stdin.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    out_fd = os.dup(1)
    os.dup2(2, 1)  # nothing printed by accident can break the frames
    import uvloop  # the gateway's own loop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_child(config, out_fd))


if __name__ == "__main__":
    main()
