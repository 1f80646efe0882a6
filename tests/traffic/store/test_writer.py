import asyncio
import json
import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pytest

import traffic.store.writer as writer_module
from tests.fixtures.postgres_fixture import PG_URL, pg_dsn
from traffic.store import (
    FeedbackRecord,
    RecordWriter,
    ShadowRecord,
    SqliteBackend,
    StoreBackend,
    StoreConfig,
    StoreUnavailable,
)
from traffic.store.postgres_backend import PostgresBackend
from traffic.store.spool import DEAD_LETTER_FILE, SKETCH_CHARS, SpoolRecord

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


def nested(depth: int) -> object:
    """A JSON value ``depth`` levels deep (lists and objects in turn), built without recursion."""
    value: object = "leaf"
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def dead_letters(config: StoreConfig) -> list[dict[str, Any]]:
    path = config.spool_dir / DEAD_LETTER_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def stored_ids(backend: StoreBackend) -> set[str]:
    ids = set()
    async for row in backend.iter_inferences(None, batch_size=50):
        ids.add(row.inference.id)
        ids.update(f.id for f in row.feedback)
    return ids


def settled(writer: RecordWriter, n: int) -> Callable[[], bool]:
    """True once ``n`` records were stored or dead-lettered, one way or another."""

    def check() -> bool:
        s = writer.stats()
        return s.written_total + s.replayed_total + s.rejected_total == n

    return check


def each_stored_or_dead_lettered(
    ids: set[str], records: Sequence[SpoolRecord], letters: Sequence[Mapping[str, Any]]
) -> None:
    lettered = {d["id"] for d in letters}
    assert all(d["error"] for d in letters)
    for record in records:
        assert (record.id in ids) != (record.id in lettered), record.id


@pytest.mark.parametrize("depth", [300, 1000, 50_000])
async def test_deeply_nested_records_are_stored_or_dead_lettered_and_the_writer_goes_on(
    store_backend, store_config, depth
):
    writer = RecordWriter(store_backend, store_config)
    await writer.start()
    deep = inference(request={"model": "auto", "messages": nested(depth)})
    feedback = FeedbackRecord(inference_id=deep.id, kind="comment", payload={"x": nested(depth)})
    writer.submit(deep)
    writer.submit(feedback)
    await wait_until(settled(writer, 2))
    after = [inference() for _ in range(5)]
    for rec in after:
        writer.submit(rec)
    await wait_until(settled(writer, 7))
    assert writer.healthy and writer.stats().tasks_alive == 3 and writer.stats().faults_total == 0
    await writer.close()

    ids = await stored_ids(store_backend)
    assert ids >= {r.id for r in after}
    letters = dead_letters(store_config)
    each_stored_or_dead_lettered(ids, [deep, feedback], letters)
    # The store's JSON encoder (stdlib json) takes a few hundred levels; far deeper it gives up
    # and the dead letter keeps the identity and a bounded sketch.
    assert (deep.id in ids) == (depth == 300)
    for letter in letters:
        assert "RecursionError" in letter["error"] and letter["record"] is None
        assert len(letter["sketch"]) <= SKETCH_CHARS + 1
    assert writer.stats().lost_total == 0


class ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def hostile_records() -> list[SpoolRecord]:
    parent = inference()
    return [
        parent,
        inference(request={"content": "NUL \x00 inside"}, error="NUL \x00", tags={"t": "\x00"}),
        inference(request={"content": "lone \ud800 surrogate"}),
        inference(request={"temperature": math.nan}, cost_usd=math.inf, latency_ms=math.nan),
        inference(request={"content": "x" * 3_000_000}),
        inference(request={"set": {1, 2}, "object": ReprRaises(), "bytes": b"\xff"}),
        inference(request=nested(100_000)),
        FeedbackRecord(
            inference_id=parent.id,
            kind="score",
            value=math.nan,
            payload=cast("dict[str, Any]", nested(999)),  # odd depth: an object
        ),
        FeedbackRecord(inference_id=parent.id, kind="comment", payload={"c": "\x00\udfff"}),
        ShadowRecord(inference_id=parent.id, target="local", response={"r": nested(20_000)}),
    ]


async def test_hostile_content_is_stored_or_dead_lettered_with_a_reason(
    store_backend, store_config
):
    writer = RecordWriter(store_backend, store_config)
    await writer.start()
    hostile = hostile_records()
    for rec in hostile:
        writer.submit(rec)
    writer.submit({"not": "a record"})  # type: ignore[arg-type]  # a caller's bug, on purpose
    await wait_until(settled(writer, len(hostile) + 1))
    after = [inference() for _ in range(5)]
    for rec in after:
        writer.submit(rec)
    await wait_until(settled(writer, len(hostile) + 6))
    assert writer.healthy and writer.stats().faults_total == 0
    await writer.close()

    ids = await stored_ids(store_backend)
    ids |= {
        s.id
        async for row in store_backend.iter_inferences(None, with_shadows=True)
        for s in row.shadows
    }
    assert ids >= {r.id for r in after} | {hostile[0].id}
    letters = dead_letters(store_config)
    assert len(letters) == writer.stats().rejected_total
    each_stored_or_dead_lettered(ids, hostile, letters)
    assert [d["error"] for d in letters if d["kind"] is None] == [
        "StoreDataError: not an inference, feedback or shadow record"
    ]
    assert writer.stats().lost_total == 0


async def test_hostile_content_while_the_database_is_down_goes_through_the_spool(
    tmp_path, writer_config
):
    db = tmp_path / "down.db"
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}"})
    backend = SqliteBackend(db, busy_timeout_s=0.05)
    await backend.connect()
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    writer = RecordWriter(backend, config)
    await writer.start()
    hostile = hostile_records()
    for rec in hostile:
        writer.submit(rec)
    await wait_until(
        lambda: writer.stats().spooled_total + writer.stats().rejected_total == len(hostile)
    )
    assert writer.stats().rejected_total >= 2  # nested too deep for the spool's encoder
    blocker.execute("ROLLBACK")
    blocker.close()
    await wait_until(settled(writer, len(hostile)))
    writer.submit(last := inference())
    await wait_until(settled(writer, len(hostile) + 1))
    assert writer.healthy and writer.stats().faults_total == 0
    await writer.close()

    ids = await stored_ids(backend)
    ids |= {
        s.id async for row in backend.iter_inferences(None, with_shadows=True) for s in row.shadows
    }
    assert last.id in ids
    each_stored_or_dead_lettered(ids, hostile, dead_letters(config))
    assert not list(config.spool_dir.glob("segment-*"))
    await backend.close()


async def test_a_task_that_raises_is_restarted_counted_and_its_batch_is_kept(
    tmp_path, writer_config, caplog
):
    db = tmp_path / "fault.db"
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}"})
    backend = SqliteBackend(db)
    await backend.connect()
    writer = RecordWriter(backend, config)
    write_batch, calls = writer._write_batch, []

    async def fails_once(batch):
        calls.append(len(batch))
        if len(calls) == 1:
            raise RuntimeError("a bug in the writer")
        await write_batch(batch)

    writer._write_batch = fails_once  # type: ignore[method-assign]  # inject the fault
    await writer.start()
    first = [inference() for _ in range(10)]
    for rec in first:
        writer.submit(rec)
    await wait_until(lambda: writer.stats().restarts_total == 1)
    later = [inference() for _ in range(10)]
    for rec in later:
        writer.submit(rec)
    await wait_until(settled(writer, 20))
    stats = writer.stats()
    assert (stats.faults_total, stats.restarts_total, stats.lost_total) == (1, 1, 0)
    assert stats.replayed_total == 10  # the batch in hand went to the spool, then the store
    assert stats.tasks_alive == 3 and stats.healthy == 1 and writer.healthy
    assert "RuntimeError: a bug in the writer" in (stats.last_error or "")
    (fault,) = [r for r in caplog.records if r.exc_info and r.name == "traffic.store.writer"]
    assert fault.exc_info[0] is RuntimeError
    await writer.close()
    assert await stored_ids(backend) == {r.id for r in first + later}
    await backend.close()


async def test_a_task_that_keeps_failing_makes_the_writer_unhealthy_until_it_recovers(
    tmp_path, writer_config, monkeypatch
):
    monkeypatch.setattr(writer_module, "FAULT_WINDOW_S", 2.0)
    db = tmp_path / "faults.db"
    config = writer_config.model_copy(update={"url": f"sqlite:///{db}"})
    backend = SqliteBackend(db)
    await backend.connect()
    writer = RecordWriter(backend, config)
    write_batch, broken = writer._write_batch, [True]

    async def fails_while_broken(batch):
        if broken[0]:
            raise RuntimeError("still broken")
        await write_batch(batch)

    writer._write_batch = fails_while_broken  # type: ignore[method-assign]  # inject the fault
    await writer.start()
    records = [inference() for _ in range(3)]
    for n, rec in enumerate(records, 1):

        def faulted(n: int = n) -> bool:
            return writer.stats().faults_total == n

        writer.submit(rec)
        await wait_until(faulted)
        if n < 3:
            assert writer.healthy  # a fault or two: restarted, still fit for traffic
    assert not writer.healthy and writer.stats().healthy == 0  # three in a row: not ready
    await wait_until(lambda: writer.stats().replayed_total == 3)  # nothing lost meanwhile

    broken[0] = False
    await wait_until(lambda: writer.healthy, within_s=10)  # the faults aged out of the window
    writer.submit(last := inference())
    await wait_until(lambda: writer.stats().written_total == 1)
    await writer.close()
    assert await stored_ids(backend) == {r.id for r in [*records, last]}
    await backend.close()


async def test_a_dead_task_makes_the_writer_unhealthy(tmp_path, writer_config):
    db = tmp_path / "dead.db"
    backend = SqliteBackend(db)
    await backend.connect()
    writer = RecordWriter(backend, writer_config.model_copy(update={"url": f"sqlite:///{db}"}))
    assert not writer.healthy  # not started
    await writer.start()
    assert writer.healthy and writer.stats().tasks_alive == 3
    writer._tasks["replay"].cancel()
    await asyncio.sleep(0)
    assert not writer.healthy and writer.stats().tasks_alive == 2
    await writer.close()
    assert not writer.healthy and writer.stats().tasks_alive == 0
    await backend.close()
