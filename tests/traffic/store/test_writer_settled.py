"""``on_settled``: the writer says which records it is done with (stored, spooled or
dead-lettered), each once, so a process feeding it through a pipe knows what it may forget."""

import sqlite3
from collections.abc import Sequence

from traffic.store import FeedbackRecord, RecordWriter, SqliteBackend
from traffic.store.spool import SpoolRecord

from .scenario import inference, wait_until


async def test_every_record_is_settled_once_whether_stored_spooled_or_refused(
    tmp_path, writer_config
):
    db = tmp_path / "settled.db"
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}"})
    backend = SqliteBackend(db, busy_timeout_s=0.05)
    await backend.connect()
    settled: list[str] = []

    def on_settled(records: Sequence[SpoolRecord]) -> None:
        settled.extend(r.id for r in records)

    writer = RecordWriter(backend, config, on_settled=on_settled)
    await writer.start()
    stored = [inference() for _ in range(20)]
    for rec in stored:
        writer.submit(rec)
    await wait_until(lambda: len(settled) == 20)
    assert sorted(settled) == sorted(r.id for r in stored)

    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # the database cannot take them: they go to the spool
    spooled = [inference() for _ in range(10)]
    for rec in spooled:
        writer.submit(rec)
    await wait_until(lambda: writer.stats().spooled_total == 10)
    await wait_until(lambda: len(settled) == 30)
    blocker.execute("ROLLBACK")
    blocker.close()
    await wait_until(lambda: writer.stats().replayed_total == 10)  # replays settle nothing more

    refused = FeedbackRecord(inference_id="not-a-uuid", kind="accepted")
    writer.submit(refused)
    await wait_until(lambda: len(settled) == 31)
    await writer.close()
    await backend.close()
    assert writer.stats().rejected_total == 1
    assert sorted(settled) == sorted([r.id for r in stored + spooled] + [refused.id])
