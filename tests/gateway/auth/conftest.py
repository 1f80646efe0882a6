"""Fixtures of the access-control tests: a Redis namespace of each test's own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
async def redis_ns() -> AsyncIterator[str]:
    """A namespace of its own per test (deleted afterwards); skips when Redis is not there."""
    client = aioredis.Redis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        await client.ping()
    except (RedisError, OSError) as exc:
        await client.aclose()
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {exc}")
    ns = f"switchyard:test-{uuid.uuid4().hex[:12]}"
    yield ns
    keys = [k async for k in client.scan_iter(match=f"{ns}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()
