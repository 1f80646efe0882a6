"""A real vLLM replica on CPU, spoken to with the OpenAI SDK.

The model is a random init, so text is garbage: tests assert the protocol, not the words.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from openai import OpenAI
from openai.types.chat import ChatCompletionFunctionToolParam
from prometheus_client.parser import text_string_to_metric_families

from serving.replica import ReplicaStartError, VllmReplica, find_free_port
from serving.vllm_config import VllmLaunchConfig
from tests.fixtures.vllm_fixture import RunningVllm

pytestmark = pytest.mark.slow

WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def client(server: RunningVllm) -> OpenAI:
    return OpenAI(base_url=server.openai_base_url, api_key="unused", max_retries=0, timeout=60)


def counter(base_url: str, name: str) -> float:
    """Sum of a Prometheus counter's samples (all label sets) on the replica's /metrics."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name == name:
            return sum(s.value for s in family.samples if s.name == f"{name}_total")
    raise AssertionError(f"{name} not in /metrics")


def test_lists_the_served_model(vllm_replica: RunningVllm) -> None:
    models = client(vllm_replica).models.list()
    assert [m.id for m in models.data] == [vllm_replica.served_model_name]


def test_chat_completion(vllm_replica: RunningVllm) -> None:
    response = client(vllm_replica).chat.completions.create(
        model=vllm_replica.served_model_name,
        messages=[{"role": "user", "content": "Write a Python hello world."}],
        max_tokens=16,
        temperature=0,
    )
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason in {"stop", "length"}
    assert response.usage is not None
    assert 0 < response.usage.completion_tokens <= 16


def test_streamed_chat_completion(vllm_replica: RunningVllm) -> None:
    stream = client(vllm_replica).chat.completions.create(
        model=vllm_replica.served_model_name,
        messages=[{"role": "user", "content": "Count to five."}],
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert len(content_chunks) > 1
    assert finishes[-1] in {"stop", "length"}
    assert chunks[-1].usage is not None
    # A token holding part of a UTF-8 character streams no text of its own.
    assert 1 < len(content_chunks) <= chunks[-1].usage.completion_tokens == 16


def test_repeated_long_prompt_hits_the_prefix_cache(vllm_replica: RunningVllm) -> None:
    openai = client(vllm_replica)
    # Unique per run so the first request is a miss even on a warm replica.
    shared = f"{id(openai)} " + "def handler(request):\n    return request.json()\n" * 60
    hits_before = counter(vllm_replica.base_url, "vllm:prefix_cache_hits")
    queries_before = counter(vllm_replica.base_url, "vllm:prefix_cache_queries")
    cached = []
    prompt_tokens = 0
    for _ in range(2):
        response = openai.chat.completions.create(
            model=vllm_replica.served_model_name,
            messages=[{"role": "user", "content": shared}],
            max_tokens=4,
            temperature=0,
        )
        assert response.usage is not None and response.usage.prompt_tokens_details is not None
        cached.append(response.usage.prompt_tokens_details.cached_tokens or 0)
        prompt_tokens = response.usage.prompt_tokens
    hits = counter(vllm_replica.base_url, "vllm:prefix_cache_hits") - hits_before
    queries = counter(vllm_replica.base_url, "vllm:prefix_cache_queries") - queries_before
    block = 32  # VllmLaunchConfig's CPU block size
    assert cached[0] < block
    assert cached[1] >= prompt_tokens - block
    assert hits >= cached[1]
    assert queries >= 2 * prompt_tokens - block


def test_tools_request_is_accepted(vllm_replica: RunningVllm) -> None:
    response = client(vllm_replica).chat.completions.create(
        model=vllm_replica.served_model_name,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
        max_tokens=16,
        temperature=0,
    )
    choice = response.choices[0]
    assert choice.message.role == "assistant"
    assert choice.finish_reason in {"stop", "length", "tool_calls"}
    for call in choice.message.tool_calls or []:
        assert call.type == "function"


def test_start_fails_fast_with_the_log_tail_when_vllm_exits(tmp_path: Path) -> None:
    config = VllmLaunchConfig(
        model_dir=tmp_path / "missing-model",
        cache_dir=tmp_path,
        port=find_free_port(),
        extra_args=("--no-such-flag",),
    )
    replica = VllmReplica(config)
    replica.start()
    try:
        with pytest.raises(ReplicaStartError, match="no-such-flag"):
            asyncio.run(replica.wait_ready(timeout=120))
        assert not replica.is_alive()
        assert replica.returncode not in (None, 0)
    finally:
        replica.stop()
