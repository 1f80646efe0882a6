"""The episode memory (this process's, Redis's) and the check of the previous step's tool calls."""

from __future__ import annotations

import asyncio
import socket
import uuid
from typing import Any

import pytest
import redis

from gateway.fleet.episode_memory import LocalEpisodeMemory, RedisEpisodeMemory, decode_memory
from gateway.redis_scripts import redis_client
from gateway.routing.episodes import call_problem
from router.episode_fallback import EpisodeMemory
from router.request_text import ToolCallText

REDIS_URL = "redis://127.0.0.1:6379/0"
SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}},
    {"type": "function", "function": {"name": "free"}},  # no schema: any object is valid
    {"type": "function", "function": {"name": "odd", "parameters": {"type": 5}}},
    {"type": "function", "function": {"name": "remote", "parameters": {"$ref": "http://x/y"}}},
    {"type": "web_search"},
    "junk",
]


def _c(name: str, args: str) -> ToolCallText:
    return ToolCallText(name, args, "id")


def test_the_previous_steps_calls_are_checked_against_the_tools_offered() -> None:
    assert call_problem([_c("read_file", '{"path": "a"}'), _c("free", "{}")], TOOLS) is None
    assert call_problem([_c("free", ""), _c("read_file", '{"path": 1}')], TOOLS) == (
        "schema:read_file"
    )
    assert call_problem([_c("rm -rf /", "{}")], TOOLS) == "unknown_tool:rm_-rf__"
    assert call_problem([_c("read_file", "{")], TOOLS) == "malformed_arguments:read_file"
    assert call_problem([_c("free", "[1]")], TOOLS) == "malformed_arguments:free"
    # a schema the validator cannot read, or cannot resolve, judges nothing
    assert call_problem([_c("odd", "{}"), _c("remote", "{}")], TOOLS) is None
    assert call_problem([_c("read_file", "{}")], "not a list") == "unknown_tool:read_file"
    assert call_problem([], None) is None


def test_this_process_remembers_a_bounded_number_of_episodes_for_a_while() -> None:
    now = [0.0]
    memory = LocalEpisodeMemory(max_episodes=2, ttl_s=10, monotonic=lambda: now[0])

    async def run() -> None:
        await memory.note_local("a", 0)
        await memory.note_local("b", 0)
        await memory.recall("a")  # "a" is now the most recently seen
        await memory.note_fallback("c", 3, "error_streak failed_step=2 problem=3_errors")
        assert (await memory.recall("b")) == EpisodeMemory()  # the least recent, forgotten
        assert (await memory.recall("a")).local_steps == frozenset({0})
        assert (await memory.recall("c")).fallback_step == 3
        now[0] = 11.0
        assert (await memory.recall("a")) == EpisodeMemory()

    asyncio.run(run())
    assert memory.stats()["episodes"] == 1.0


def test_a_redis_hash_reads_back_and_odd_fields_are_ignored() -> None:
    fields = {
        b"local:3": b"1",
        b"local:x": b"1",
        b"fallback": b"4|invalid_tool_call a=b",
        b"?": b"",
    }
    assert decode_memory(fields) == EpisodeMemory(frozenset({3}), 4, "invalid_tool_call a=b")
    assert decode_memory({"fallback": "nope"}) == EpisodeMemory()


def test_the_fleets_memory_lives_in_redis() -> None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {exc}")
    namespace = f"test-episode-memory-{uuid.uuid4().hex[:8]}"

    async def run() -> EpisodeMemory:
        client = redis_client(REDIS_URL, timeout_s=1.0, max_connections=4)
        memory = RedisEpisodeMemory(client, namespace, ttl_s=30, retry_s=0.5)
        other = RedisEpisodeMemory(
            redis_client(REDIS_URL, timeout_s=1.0, max_connections=4),
            namespace,
            ttl_s=30,
            retry_s=0.5,
        )
        try:
            await memory.note_local("ep", 0)
            await memory.note_local("ep", 1)
            await memory.note_fallback("ep", 2, "invalid_tool_call failed_step=1 problem=p")
            ttl = await client.pttl(memory.key("ep"))
            assert 0 < ttl <= 30_000
            return await other.recall("ep")  # another gateway's view
        finally:
            await client.delete(memory.key("ep"))
            await memory.aclose()
            await other.aclose()

    seen = asyncio.run(run())
    assert seen == EpisodeMemory(frozenset({0, 1}), 2, "invalid_tool_call failed_step=1 problem=p")


def test_an_unreachable_redis_answers_an_empty_memory_and_is_not_asked_again_at_once() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    now = [0.0]

    async def run() -> RedisEpisodeMemory:
        client = redis_client(f"redis://127.0.0.1:{port}/0", timeout_s=0.2, max_connections=2)
        memory = RedisEpisodeMemory(client, "n", ttl_s=30, retry_s=5, monotonic=lambda: now[0])
        assert await memory.recall("ep") == EpisodeMemory()
        assert memory.failures == 1
        await memory.note_local("ep", 0)  # dropped without a call while Redis is skipped
        assert await memory.recall("ep") == EpisodeMemory()
        now[0] = 6.0
        await memory.note_local("ep", 0)  # asked again: fails again
        await memory.aclose()
        return memory

    memory = asyncio.run(run())
    assert memory.failures == 3 and memory.stats() == {"failures": 3.0}
