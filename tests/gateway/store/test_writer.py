import asyncio
import json
import sqlite3

import pytest

from gateway.store import (
    FeedbackRecord,
    PostgresBackend,
    RecordWriter,
    ShadowRecord,
    SqliteBackend,
    StoreBackend,
    StoreUnavailable,
)
from gateway.store.spool import DEAD_LETTER_FILE

from .conftest import PG_URL, pg_dsn
from .scenario import inference, wait_until
from .tcp_proxy import TcpProxy


async def count_rows(backend: StoreBackend) -> int:
    return sum([1 async for _ in backend.iter_inferences(None, batch_size=2000)])


async def test_writer_batches_and_never_drops(store_backend, store_config):
    config = store_config.model_copy(update={"queue_size": 64})
    writer = RecordWriter(store_backend, config)
    await writer.start()
    records = [inference() for _ in range(10_000)]
    for n, rec in enumerate(records):
        writer.submit(rec)
        if n % 1000 == 0:
            await asyncio.sleep(0)  # let the drain task take some off the queue
    writer.submit(FeedbackRecord(inference_id=records[0].id, kind="accepted"))
    writer.submit(ShadowRecord(inference_id=records[0].id, target="local", response={"a": 1}))
    await writer.close(timeout=60)

    stats = writer.stats()
    assert stats.queue_full_total > 0  # the small queue overflowed ...
    assert stats.spooled_total == stats.queue_full_total  # ... into the spool, not the floor
    assert stats.written_total + stats.replayed_total == len(records) + 2
    assert stats.lost_total == 0 and stats.rejected_total == 0
    ids = [r.inference.id async for r in store_backend.iter_inferences(None, batch_size=2000)]
    assert ids == sorted(r.id for r in records)  # every record exactly once
    first = await anext(aiter(store_backend.iter_inferences(None, 1, with_shadows=True)))
    assert len(first.feedback) == 1 and len(first.shadows) == 1
    assert not list(config.spool_dir.glob("segment-*"))  # replayed segments are removed


async def test_close_flushes_a_pending_batch(store_backend, store_config):
    config = store_config.model_copy(update={"flush_interval_s": 30.0, "batch_size": 10_000})
    writer = RecordWriter(store_backend, config)
    await writer.start()
    for _ in range(123):
        writer.submit(inference())
    await asyncio.sleep(0.05)
    assert await count_rows(store_backend) == 0  # still waiting to fill the batch
    await writer.close()
    assert await count_rows(store_backend) == 123
    assert writer.stats().written_total == 123


async def test_refused_records_go_to_dead_letters(store_backend, store_config):
    writer = RecordWriter(store_backend, store_config)
    await writer.start()
    good = [inference() for _ in range(9)]
    for rec in good[:5]:
        writer.submit(rec)
    writer.submit(FeedbackRecord(inference_id="not-a-uuid", kind="accepted"))
    writer.submit(inference(request={"not json": {1, 2}}))
    for rec in good[5:]:
        writer.submit(rec)
    await writer.close()
    assert await count_rows(store_backend) == 9
    stats = writer.stats()
    assert stats.rejected_total == 2 and stats.written_total == 9
    lines = (store_config.spool_dir / DEAD_LETTER_FILE).read_text().splitlines()
    dead = [json.loads(line) for line in lines]
    assert [d["kind"] for d in dead] == ["feedback", "inference"]
    assert dead[0]["record"]["inference_id"] == "not-a-uuid"
    assert all(d["error"] for d in dead)


async def test_sqlite_outage_spools_then_replays(tmp_path, writer_config):
    db = tmp_path / "out.db"
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}"})
    backend = SqliteBackend(db, busy_timeout_s=0.05)
    await backend.connect()
    writer = RecordWriter(backend, config)
    await writer.start()

    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    down = [inference() for _ in range(50)]
    for rec in down:
        writer.submit(rec)
    await wait_until(lambda: writer.stats().spooled_total == 50)
    assert not writer.stats().db_available
    with pytest.raises(StoreUnavailable):
        await backend.insert_inferences([inference()])

    blocker.execute("ROLLBACK")
    blocker.close()
    await wait_until(lambda: writer.stats().replayed_total == 50)
    assert writer.stats().db_available
    writer.submit(inference())
    await writer.close()
    assert await count_rows(backend) == 51
    await backend.close()


async def test_spool_survives_a_restart(tmp_path, writer_config):
    db = tmp_path / "restart.db"
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}"})
    backend = SqliteBackend(db, busy_timeout_s=0.05)
    await backend.connect()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    first = RecordWriter(backend, config)
    await first.start()
    for _ in range(20):
        first.submit(inference())
    await first.close(timeout=0.5)  # database still locked: everything ends up in the spool
    first.submit(inference())  # after close: spooled synchronously, not dropped
    assert first.stats().spooled_total == 21
    assert list(config.spool_dir.glob("segment-*"))
    blocker.execute("ROLLBACK")
    blocker.close()

    second = RecordWriter(backend, config)  # the next start replays what was left
    await second.start()
    await wait_until(lambda: second.stats().replayed_total == 21)
    await second.close()
    assert await count_rows(backend) == 21
    await backend.close()


@pytest.mark.postgres
async def test_postgres_outage_spools_then_replays_and_reconnects(pg_empty_schema, writer_config):
    pg_schema = pg_empty_schema
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()
    via_proxy = pg_dsn(pg_schema, f"postgresql://postgres@127.0.0.1:{proxy.port}/test")
    direct = PostgresBackend(pg_dsn(pg_schema, PG_URL))
    backend = PostgresBackend(via_proxy, connect_timeout_s=2)
    await direct.connect()
    await backend.connect()
    config = writer_config.model_copy(update={"url": via_proxy})
    writer = RecordWriter(backend, config)
    await writer.start()
    try:
        before = [inference() for _ in range(20)]
        for rec in before:
            writer.submit(rec)
        await wait_until(lambda: writer.stats().written_total == 20)

        await proxy.stop()  # the server "goes away" for this client; it stays up for others
        during = [inference() for _ in range(30)]
        for rec in during:
            writer.submit(rec)
        await wait_until(lambda: writer.stats().spooled_total == 30)
        assert not writer.stats().db_available
        assert await count_rows(direct) == 20
        await asyncio.sleep(0.3)  # a few failed replay attempts with back-off

        await proxy.start()  # same port: the server "restarted"
        await wait_until(lambda: writer.stats().replayed_total == 30)
        assert await backend.inference_exists(during[-1].id)  # queries reconnected too
        writer.submit(inference())
        await writer.close()
        ids = {r.inference.id async for r in direct.iter_inferences()}
        assert ids >= {r.id for r in before + during}
        assert len(ids) == 51
    finally:
        await writer.close()
        await backend.close()
        await direct.close()
        await proxy.stop()


@pytest.mark.postgres
async def test_postgres_server_that_never_answers_is_unavailable(pg_empty_schema):
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()
    dsn = pg_dsn(pg_empty_schema, f"postgresql://postgres@127.0.0.1:{proxy.port}/test")
    backend = PostgresBackend(dsn, connect_timeout_s=2, operation_timeout_s=0.3)
    try:
        await backend.connect()
        await backend.insert_inferences([inference()])
        proxy.stall()
        with pytest.raises(StoreUnavailable, match="no answer"):
            await backend.insert_inferences([inference()])
        proxy.resume()
        await backend.insert_inferences([inference()])  # a fresh connection
        assert await count_rows(backend) == 2
    finally:
        await backend.close()
        await proxy.stop()


async def test_unwritable_spool_keeps_records_in_memory_until_it_works(tmp_path, writer_config):
    db = tmp_path / "disk.db"
    blocked_spool = tmp_path / "spool-is-a-file"
    blocked_spool.write_text("not a directory")
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}", "spool_dir": blocked_spool})
    backend = SqliteBackend(db, busy_timeout_s=0.05)
    await backend.connect()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # no database ...
    writer = RecordWriter(backend, config)
    await writer.start()
    for _ in range(10):
        writer.submit(inference())
    # ... and no disk: the records wait in memory, retried with back-off
    await wait_until(lambda: writer.stats().spool_errors_total >= 2)
    assert writer.stats().overflow_depth == 10 and writer.stats().spooled_total == 0

    blocked_spool.unlink()  # the disk comes back
    await wait_until(lambda: writer.stats().spooled_total == 10)
    blocker.execute("ROLLBACK")  # the database comes back
    blocker.close()
    await wait_until(lambda: writer.stats().replayed_total == 10)
    await writer.close()
    assert await count_rows(backend) == 10
    assert writer.stats().lost_total == 0
    await backend.close()
