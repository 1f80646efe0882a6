"""PostgreSQL: reads on the request path never wait behind background writes.

A key lookup or an ``inference_exists`` (``/v1/feedback``) must answer while the connection that
carries the record writer's inserts or the budget flusher's ``add_spend`` is frozen (a statement
sent, no answer), and the frozen writes must still complete, once, when the server answers.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.auth import KeyService
from tests.fixtures.postgres_fixture import PG_URL, pg_dsn
from traffic.store.postgres_backend import PostgresBackend

from .scenario import inference, wait_until
from .tcp_proxy import TcpProxy

pytestmark = pytest.mark.postgres


async def test_frozen_background_writes_do_not_hold_request_path_reads(
    pg_empty_schema: str,
) -> None:
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.start()
    direct = PostgresBackend(pg_dsn(pg_empty_schema, PG_URL))
    backend = PostgresBackend(
        pg_dsn(pg_empty_schema, f"postgresql://postgres@127.0.0.1:{proxy.port}/test"),
        connect_timeout_s=2,
        operation_timeout_s=10,  # the frozen writes stay pending for the whole test
    )
    await direct.connect()
    await backend.connect()
    try:
        record, _ = await KeyService(direct).create("reader")
        stored = inference()
        await direct.insert_inferences([stored])

        proxy.stall_on(b"UPDATE api_key SET spent_usd")  # the budget flusher's statement
        proxy.stall_on(b"INSERT INTO inference")  # the record writer's
        spending = asyncio.create_task(backend.add_spend(record.id, 0.5))
        await wait_until(lambda: proxy.frozen_connections == 1)
        inserting = asyncio.create_task(backend.insert_inferences([inference()]))
        await asyncio.sleep(0.05)  # the insert is frozen too, or queued behind the flush

        found = await backend.get_api_key_by_hash(record.key_hash)
        exists = await backend.inference_exists(stored.id)
        assert not spending.done() and not inserting.done()  # answered during the freeze
        assert found is not None and found.id == record.id
        assert exists

        proxy.resume()
        assert await spending == pytest.approx(0.5)
        await inserting
        after = await direct.get_api_key(record.id)
        assert after is not None and after.spent_usd == pytest.approx(0.5)  # added once
        assert len([r async for r in direct.iter_inferences()]) == 2
    finally:
        proxy.resume()
        await backend.close()
        await direct.close()
        await proxy.stop()
