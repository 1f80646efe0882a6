"""The simulator reports prompt caching as the providers do: OpenAI's automatic prefix caching in
128-token increments from 1024 tokens, Anthropic's ``cache_control`` breakpoints with reads and
writes apart (see ``loadtests/frontier_sim/prompt_cache.py``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import anthropic
import httpx
import openai
import pytest

from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from loadtests.frontier_sim.prompt_cache import AutomaticPrefix, CacheUse, PromptCache

EPHEMERAL: Any = {"type": "ephemeral"}


def long_text(chars: int) -> str:
    """Text of ``chars`` characters that no other test sends (the session's simulator is shared)."""
    head = uuid.uuid4().hex + " "
    return (head + "the gateway caches prompt prefixes " * (chars // 35 + 1))[:chars]


def openai_cached(text_chars: int) -> int:
    """OpenAI's report for a prompt of ``text_chars`` characters seen before: whole 128-token
    chunks (4 characters a token), from 1024 tokens on."""
    cached = text_chars // 512 * 128
    return cached if cached >= 1024 else 0


@pytest.fixture(scope="module")
def oai(frontier_sim: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{frontier_sim.base_url}/v1", api_key="sk-sim", max_retries=0)


@pytest.fixture(scope="module")
def claude(frontier_sim: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=frontier_sim.base_url, api_key="sk-sim", max_retries=0)


def test_openai_chat_reads_a_seen_prefix_in_128_token_steps(oai: openai.OpenAI) -> None:
    text = long_text(6000)

    def ask(*extra: Any) -> Any:
        messages: Any = [{"role": "user", "content": text}, *extra]
        return oai.chat.completions.create(model="gpt-4o", messages=messages).usage

    first, second = ask(), ask()
    assert first.prompt_tokens_details.cached_tokens == 0
    assert second.prompt_tokens == first.prompt_tokens  # every prompt token, cached ones included
    assert second.prompt_tokens_details.cached_tokens == openai_cached(6000) == 1408
    longer = ask({"role": "assistant", "content": "ok"}, {"role": "user", "content": text})
    assert longer.prompt_tokens_details.cached_tokens == 1408  # the shared prefix only
    again = ask({"role": "assistant", "content": "ok"}, {"role": "user", "content": text})
    assert again.prompt_tokens_details.cached_tokens == openai_cached(len(f"{text} ok {text}"))


def test_openai_prompts_under_1024_tokens_are_not_cached(oai: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": long_text(4000)}]  # 1000 tokens
    for _ in range(2):
        usage = oai.chat.completions.create(model="gpt-4o", messages=messages).usage
        assert usage is not None and usage.prompt_tokens_details is not None
        assert usage.prompt_tokens_details.cached_tokens == 0


def test_openai_stream_usage_and_responses_report_cached_tokens(
    oai: openai.OpenAI, frontier_sim: Any
) -> None:
    text = long_text(8192)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
    stream_body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    url = frontier_sim.base_url + "/v1/chat/completions"
    httpx.post(url, json=body).raise_for_status()
    with httpx.stream("POST", url, json=stream_body) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line[6:].startswith("{")]
    assert chunks[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == 2048

    responses = [oai.responses.create(model="gpt-4o", input=text).usage for _ in range(2)]
    assert responses[0] is not None and responses[1] is not None
    assert responses[0].input_tokens_details.cached_tokens == 0
    # Responses prompts are the instructions (none here) and the input, joined by a space.
    assert responses[1].input_tokens_details.cached_tokens == openai_cached(1 + len(text))


def test_prefixes_are_cached_per_model(oai: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": long_text(6000)}]
    oai.chat.completions.create(model="gpt-4o", messages=messages)
    other = oai.chat.completions.create(model="gpt-4o-mini", messages=messages).usage
    assert other is not None and other.prompt_tokens_details is not None
    assert other.prompt_tokens_details.cached_tokens == 0


def test_anthropic_writes_then_reads_the_prefix_up_to_the_last_breakpoint(
    claude: anthropic.Anthropic,
) -> None:
    system = long_text(6000)  # 1500 tokens
    question = "Which files changed?"
    turn1: Any = [{"role": "user", "content": [{"type": "text", "text": question}]}]

    def ask(messages: Any) -> Any:
        return claude.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=16,
            system=[{"type": "text", "text": system, "cache_control": EPHEMERAL}],
            messages=messages,
        ).usage

    prompt_tokens = (len(system) + len(question)) // 4 + 1
    first, second = ask(turn1), ask(turn1)
    assert (first.cache_creation_input_tokens, first.cache_read_input_tokens) == (1500, 0)
    assert first.input_tokens == prompt_tokens - 1500  # excludes cache reads and writes
    assert (second.cache_creation_input_tokens, second.cache_read_input_tokens) == (0, 1500)
    assert second.input_tokens == first.input_tokens

    # The next turn marks its last block: the system prefix is read, the turns between written.
    follow_up = long_text(2000)
    turn2: Any = [
        *turn1,
        {"role": "assistant", "content": "Two."},
        {
            "role": "user",
            "content": [{"type": "text", "text": follow_up, "cache_control": EPHEMERAL}],
        },
    ]
    third, fourth = ask(turn2), ask(turn2)
    cached = (len(system) + len(question) + len("Two.") + len(follow_up)) // 4
    assert (third.cache_read_input_tokens, third.cache_creation_input_tokens) == (
        1500,
        cached - 1500,
    )
    assert (fourth.cache_read_input_tokens, fourth.cache_creation_input_tokens) == (cached, 0)


def test_anthropic_caches_tools_and_skips_short_prefixes(
    claude: anthropic.Anthropic, frontier_sim: Any
) -> None:
    tool: Any = {
        "name": "lookup",
        "description": long_text(5000),
        "input_schema": {"type": "object", "properties": {}},
        "cache_control": EPHEMERAL,
    }
    body: Any = {
        "model": "claude-haiku-4-5",
        "max_tokens": 16,
        "tools": [tool],
        "messages": [{"role": "user", "content": "hello"}],
    }
    tool_tokens = len(json.dumps(tool, separators=(",", ":"))) // 4
    url = frontier_sim.base_url + "/v1/messages"
    first = httpx.post(url, json=body).json()["usage"]
    assert first["cache_creation_input_tokens"] == tool_tokens
    with httpx.stream("POST", url, json={**body, "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    start = json.loads(lines[0][6:])
    assert start["type"] == "message_start"
    usage = start["message"]["usage"]
    assert (usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]) == (
        tool_tokens,
        0,
    )
    assert usage["input_tokens"] == first["input_tokens"]

    short: Any = {"type": "text", "text": long_text(2000), "cache_control": EPHEMERAL}  # 500 tokens
    for _ in range(2):
        usage = claude.messages.create(
            model="claude-haiku-4-5",
            max_tokens=16,
            messages=[{"role": "user", "content": [short]}],
        ).usage
        assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (0, 0)


def test_the_cache_forgets_least_recently_used_prefixes_and_can_be_off() -> None:
    cache = PromptCache(capacity=16)  # 16 chunks of 128 tokens
    a, b = AutomaticPrefix("m", "a" * 4096), AutomaticPrefix("m", "b" * 4096)  # 8 chunks each
    assert cache.use(a, 1025) == CacheUse() and cache.use(a, 1025) == CacheUse(read=1024)
    cache.use(b, 1025)
    assert len(cache) == 16
    cache.use(AutomaticPrefix("m", "c" * 4096), 1025)  # pushes `a` out (`b` was used later)
    assert len(cache) == 16
    assert cache.use(b, 1025) == CacheUse(read=1024)
    assert cache.use(a, 1025) == CacheUse()

    with run_in_thread(SimulatorConfig(prompt_cache_size=0)) as sim:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 8000}]}
        for _ in range(2):
            usage = httpx.post(sim.base_url + "/v1/chat/completions", json=body).json()["usage"]
            assert usage["prompt_tokens_details"]["cached_tokens"] == 0
