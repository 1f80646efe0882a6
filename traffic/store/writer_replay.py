"""One replay pass of the record writer's spool: every segment this process can claim, into the
database.

A segment is claimed (:meth:`Spool.claim`: one another process appends to or replays is skipped),
stored in batches of ``batch_size`` through the writer's own store step (which isolates the
records the database refuses), what the database refused and the lines that could not be read
are dead-lettered, and only then is the segment deleted. An exception (the database gone
mid-pass) leaves the segment on disk for the next pass; inserts are idempotent by id, so a batch
stored before it is stored once. The caller (:class:`traffic.store.writer.RecordWriter`'s replay
task) pings the database first and decides when to try again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from traffic.store.spool import Spool, SpoolClaim, SpoolRecord
from traffic.store.writer_stats import Rejected, WriterStats

Store = Callable[[Sequence[SpoolRecord]], Awaitable[tuple[int, Rejected]]]
Reject = Callable[[Rejected], Awaitable[None]]


async def replay_spool(
    spool: Spool, store: Store, reject: Reject, batch_size: int, stats: WriterStats
) -> None:
    """Store every segment of ``spool`` this process can claim; counts into ``stats``."""
    await asyncio.to_thread(spool.seal)
    for path in await asyncio.to_thread(spool.segments):
        claim = await _claim(spool, path)
        if claim is None:
            continue
        try:
            await _replay_claim(spool, claim, store, reject, batch_size, stats)
        finally:
            claim.release()


async def _claim(spool: Spool, path: Path) -> SpoolClaim | None:
    """:meth:`Spool.claim` in a thread. Cancelled while the thread runs (close() stopping the
    replay task), it waits for the thread and gives the lock back: a claim left to the garbage
    collector would keep its segment's flock, and the writer's final replay would skip it."""
    claiming = asyncio.ensure_future(asyncio.to_thread(spool.claim, path))
    try:
        return await asyncio.shield(claiming)
    except asyncio.CancelledError:
        late = await asyncio.gather(claiming, return_exceptions=True)
        if isinstance(late[0], SpoolClaim):
            late[0].release()
        raise


async def _replay_claim(
    spool: Spool,
    claim: SpoolClaim,
    store: Store,
    reject: Reject,
    batch_size: int,
    stats: WriterStats,
) -> None:
    written, rejected = 0, []
    for start in range(0, len(claim.records), batch_size):
        ok, refused = await store(claim.records[start : start + batch_size])
        written += ok
        rejected += refused
    await reject(rejected)
    if claim.bad_lines:
        stats.rejected_total += len(claim.bad_lines)
        await asyncio.to_thread(spool.dead_letter, claim.bad_lines)
    await asyncio.to_thread(claim.remove)
    stats.replayed_total += written
