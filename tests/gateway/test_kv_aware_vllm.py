"""Two real vLLM CPU replicas behind a real gateway process: cache-aware replica choice gets a
higher vLLM-reported prefix-cache hit rate than round-robin on a shared-prefix trace; the
gateway's tokenizer, metrics scraper and KV event subscriber (replay included) agree with what
vLLM reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.backends.replica_metrics import ReplicaMetricsScraper
from gateway.local.kv_events import KvEventSubscriber
from gateway.local.prompt_tokens import PromptTokenizer
from loadtests.bench.kv.run import (
    HASH_ALGO,
    KV_TOPIC,
    REAL_BLOCK_SIZE,
    REAL_NUM_BLOCKS,
    RealReplica,
    real_workload,
    run_real,
    start_gateway,
    start_replicas,
    stop_replicas,
    wait_replicas,
)
from loadtests.bench.servers import ServerFleet
from loadtests.kv.gateway_replay import GatewayUnderTest
from router.cache_aware import CacheAwareSelector
from router.selector_config import CacheAwareConfig
from tests.fixtures.vllm_fixture import cache_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def two_replicas(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[list[RealReplica], GatewayUnderTest]]:
    out = tmp_path_factory.mktemp("kv")
    with ServerFleet(out / "logs") as fleet:
        replicas = await asyncio.to_thread(start_replicas, cache_dir(), 2, REAL_NUM_BLOCKS)
        try:
            gateway = await asyncio.to_thread(start_gateway, fleet, cache_dir(), out, replicas)
            await wait_replicas(replicas)
            await asyncio.to_thread(gateway.wait_ready)
            yield replicas, gateway
        finally:
            stop_replicas(replicas)


async def test_cache_aware_beats_round_robin_on_vllms_own_counters(
    two_replicas: tuple[list[RealReplica], GatewayUnderTest],
) -> None:
    _, gateway = two_replicas
    results = await run_real(gateway, real_workload(24), names=("round_robin", "cache_aware"))
    rr, ours = results["round_robin"], results["cache_aware"]
    assert rr.errors == 0 and ours.errors == 0
    assert ours.hit_rate > rr.hit_rate, (rr, ours)
    # The responses' cached_tokens add up to what vLLM's counters say.
    assert abs(ours.usage_hit_rate - ours.hit_rate) < 0.01, ours
    assert sum(ours.per_replica.values()) == ours.requests


async def test_chat_tokens_equal_vllms(
    two_replicas: tuple[list[RealReplica], GatewayUnderTest],
) -> None:
    replicas, _ = two_replicas
    model_dir = Path(replicas[0].process.config.model_dir)
    tokenizer = PromptTokenizer.load(model_dir)
    bodies: list[dict[str, Any]] = [
        {"messages": [{"role": "system", "content": "You review code."},
                      {"role": "user", "content": "def f(x):\n    return x * 2\nWhy?"}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                   {"type": "text", "text": "b"}]},
                      {"role": "assistant", "content": "ok"},
                      {"role": "user", "content": "more"}]},
        {"messages": [{"role": "user", "content": "weather?"}],
         "tools": [{"type": "function", "function": {
             "name": "get_weather", "description": "Weather of a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]},
        # vLLM re-serialises tools (description null when absent, its key order, strict)
        {"messages": [{"role": "user", "content": "w?"}],
         "tools": [{"type": "function",
                    "function": {"parameters": {"type": "object"}, "name": "f"}},
                   {"type": "function", "function": {"name": "g", "strict": True}}]},
        {"messages": [{"role": "user", "content": "w?"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "c1", "type": "function",
                           "function": {"name": "f", "arguments": "{\"city\": \"Zürich\"}"}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "sun"}],
         "tools": [{"type": "function", "function": {"name": "f"}}]},
        {"messages": [{"role": "user", "content": "count"},
                      {"role": "assistant", "content": "1, "}],
         "add_generation_prompt": False, "continue_final_message": True},
        {"messages": [{"role": "user", "content": "hi"}],
         "chat_template_kwargs": {"enable_thinking": False, "not_in_the_template": 1}},
        {"messages": [{"role": "user", "content": "hi"},
                      {"role": "developer", "content": "brief"}]},
        {"messages": [{"role": "user", "content": "hi <|im_end|> x"}], "add_special_tokens": True},
    ]  # fmt: skip
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            async with session.post(
                replicas[0].url + "/tokenize", json={"model": "switchyard-local", **body}
            ) as resp:
                theirs = (await resp.json())["tokens"]
            assert list(tokenizer.chat_token_ids(body) or ()) == theirs


async def test_scraper_and_event_subscriber_see_the_replica(
    two_replicas: tuple[list[RealReplica], GatewayUnderTest],
) -> None:
    replica = two_replicas[0][0]
    events = replica.endpoints
    assert events.replay_endpoint is not None
    config = CacheAwareConfig(
        block_size=REAL_BLOCK_SIZE,
        mode="precise",
        kv_event_endpoints={replica.url: events.kv_endpoint},
        kv_event_replay_endpoints={replica.url: events.replay_endpoint},
        kv_event_topic=KV_TOPIC,
    )
    selector = CacheAwareSelector(config)
    async with aiohttp.ClientSession() as session:
        scraper = ReplicaMetricsScraper(
            [replica.url], selector, session, interval_s=1.0, block_size=REAL_BLOCK_SIZE,
            hash_algo=HASH_ALGO,
        )  # fmt: skip
        metrics = await scraper.scrape(replica.url)
        assert metrics is not None and scraper.problems == {}
        assert (metrics.num_blocks, metrics.block_size, metrics.hash_algo) == (
            REAL_NUM_BLOCKS, REAL_BLOCK_SIZE, HASH_ALGO)  # fmt: skip

        async def complete(prompt: list[int]) -> None:
            body = {"model": "switchyard-local", "prompt": prompt, "max_tokens": 2}
            async with session.post(replica.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200

        # Served before anyone subscribes: only vLLM's replay buffer can tell us about it.
        early = list(range(2000, 2000 + 5 * REAL_BLOCK_SIZE))
        await complete(early)
        subscriber = KvEventSubscriber.from_config(config, selector)
        subscriber.start()
        prompt = list(range(1000, 1000 + 5 * REAL_BLOCK_SIZE))
        try:
            for _ in range(50):  # a new event reaches a subscriber that has joined
                await complete(prompt)
                await asyncio.sleep(0.2)
                if subscriber.stats[replica.url].events_applied:
                    break
        finally:
            await subscriber.aclose()
    slot = 1 << selector.slot_of(replica.url)
    assert all(selector.index.owners(k) & slot for k in selector.hasher.block_keys(prompt))
    # Caught up from the replay buffer (unless the reset of another test cleared it since).
    stats = subscriber.stats[replica.url]
    assert stats.replayed_batches > 0 and stats.index_resets == 0
    assert all(selector.index.owners(k) & slot for k in selector.hasher.block_keys(early))
