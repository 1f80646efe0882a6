"""Two real vLLM CPU replicas: cache-aware replica choice gets a higher vLLM-reported prefix-cache
hit rate than round-robin on a shared-prefix trace; the gateway's tokenizer, metrics scraper and
KV event subscriber agree with what vLLM reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.backends.replica_metrics import ReplicaMetricsScraper
from gateway.kv_event_subscriber import KvEventSubscriber
from gateway.prompt_tokens import PromptTokenizer
from loadtests.bench_kv import (
    HASH_ALGO,
    KV_TOPIC,
    REAL_BLOCK_SIZE,
    REAL_NUM_BLOCKS,
    RealReplica,
    run_real,
    start_replicas,
    stop_replicas,
    wait_replicas,
)
from router.cache_aware import CacheAwareSelector
from router.selector_config import CacheAwareConfig
from tests.fixtures.vllm_fixture import cache_dir

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def two_replicas() -> AsyncIterator[list[RealReplica]]:
    replicas = start_replicas(cache_dir(), 2, REAL_NUM_BLOCKS)
    try:
        await wait_replicas(replicas)
        yield replicas
    finally:
        stop_replicas(replicas)


async def test_cache_aware_beats_round_robin_on_vllms_own_counters(
    two_replicas: list[RealReplica],
) -> None:
    results = await run_real(two_replicas, sessions=24, names=("round_robin", "cache_aware"))
    rr, ours = results["round_robin"], results["cache_aware"]
    assert rr.errors == 0 and ours.errors == 0
    assert ours.hit_rate > rr.hit_rate, (rr, ours)
    assert ours.max_mean_requests <= 1.5, ours


async def test_chat_tokens_equal_vllms(two_replicas: list[RealReplica]) -> None:
    model_dir = Path(two_replicas[0].process.config.model_dir)
    tokenizer = PromptTokenizer.load(model_dir)
    bodies = [
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
    ]  # fmt: skip
    async with aiohttp.ClientSession() as session:
        for body in bodies:
            async with session.post(
                two_replicas[0].url + "/tokenize", json={"model": "switchyard-local", **body}
            ) as resp:
                theirs = (await resp.json())["tokens"]
            assert list(tokenizer.chat_token_ids(body) or ()) == theirs


async def test_scraper_and_event_subscriber_see_the_replica(
    two_replicas: list[RealReplica],
) -> None:
    replica = two_replicas[0]
    selector = CacheAwareSelector(
        CacheAwareConfig(
            block_size=REAL_BLOCK_SIZE,
            mode="precise",
            kv_event_endpoints={replica.url: replica.kv_endpoint},
        )
    )
    async with aiohttp.ClientSession() as session:
        scraper = ReplicaMetricsScraper(
            [replica.url], selector, session, interval_s=1.0, block_size=REAL_BLOCK_SIZE,
            hash_algo=HASH_ALGO,
        )  # fmt: skip
        metrics = await scraper.scrape(replica.url)
        assert metrics is not None and scraper.problems == {}
        assert (metrics.num_blocks, metrics.block_size, metrics.hash_algo) == (
            REAL_NUM_BLOCKS, REAL_BLOCK_SIZE, HASH_ALGO)  # fmt: skip
        subscriber = KvEventSubscriber({replica.url: replica.kv_endpoint}, selector, topic=KV_TOPIC)
        subscriber.start()
        try:
            await asyncio.sleep(1.0)
            prompt = list(range(1000, 1000 + 5 * REAL_BLOCK_SIZE))
            body = {"model": "switchyard-local", "prompt": prompt, "max_tokens": 2}
            async with session.post(replica.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
            for _ in range(50):
                if subscriber.stats[replica.url].events_applied:
                    break
                await asyncio.sleep(0.1)
        finally:
            await subscriber.stop()
    keys = selector.hasher.block_keys(prompt)
    slot = selector.slot_of(replica.url)
    assert all(selector.index.owners(k) & (1 << slot) for k in keys)
