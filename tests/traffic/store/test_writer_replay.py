import asyncio
import threading

from traffic.store.spool import Spool, SpoolClaim
from traffic.store.writer_replay import replay_spool
from traffic.store.writer_stats import WriterStats

from .scenario import inference


class SlowClaims(Spool):
    """A real spool whose claims wait for the test's go-ahead, in their thread."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.claiming = threading.Event()
        self.go = threading.Event()

    def claim(self, path):  # type: ignore[no-untyped-def]
        self.claiming.set()
        self.go.wait(5)
        return super().claim(path)


async def test_a_replay_cancelled_while_it_claims_gives_the_segment_back(tmp_path):
    spool = SlowClaims(tmp_path, segment_bytes=1 << 20)
    spool.append([inference() for _ in range(3)])
    stored: list[object] = []

    async def store(batch):  # type: ignore[no-untyped-def]
        stored.extend(batch)
        return len(batch), []

    async def reject(rejected):  # type: ignore[no-untyped-def]
        return None

    replay = asyncio.create_task(replay_spool(spool, store, reject, 100, WriterStats()))
    await asyncio.to_thread(spool.claiming.wait, 5)
    replay.cancel()  # what close() does to the replay task
    spool.go.set()  # the thread takes the segment's lock after the cancel
    await asyncio.gather(replay, return_exceptions=True)

    (segment,) = spool.segments()
    claim = Spool.claim(spool, segment)  # the final replay can claim it: the lock was given back
    assert isinstance(claim, SpoolClaim) and len(claim.records) == 3
    claim.release()
    stats = WriterStats()
    await replay_spool(spool, store, reject, 100, stats)
    assert stats.replayed_total == 3 and spool.segments() == []
