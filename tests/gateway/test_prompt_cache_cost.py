"""Cached prompt tokens end to end: the real gateway in front of the frontier simulator, which
caches prompts as OpenAI and Anthropic do; the record of a repeated prompt carries its cache
reads and writes, and its cost is the price book's for them (the provider's own cache prices)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gateway.backends.base import Usage
from gateway.backends.pricing import PriceBook
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from traffic.store.records import InferenceRecord

OPENAI_TARGET, ANTHROPIC_TARGET = "openai-priced", "anthropic-priced"
DEEPSEEK_TARGET = "deepseek-priced"
EPHEMERAL: Any = {"type": "ephemeral"}


@pytest.fixture(scope="module")
def gw(frontier_sim: Any) -> Iterator[GatewayThread]:
    """Frontier targets without configured prices: litellm's price map prices them."""
    sim = frontier_sim.base_url
    config = gateway_config(
        sim,
        backends={
            OPENAI_TARGET: {"kind": "litellm", "model": "openai/gpt-4o", "api_base": sim + "/v1"},
            ANTHROPIC_TARGET: {
                "kind": "litellm",
                "model": "anthropic/claude-sonnet-4-5",
                "api_base": sim,
            },
            # An OpenAI-compatible provider, called directly (pass-through), whose usage says
            # its cache reads in fields of its own (the simulator answers deepseek-* so).
            DEEPSEEK_TARGET: {
                "kind": "litellm",
                "model": "deepseek/deepseek-chat",
                "api_base": sim + "/v1",
            },
        },
        routing={
            "default": OPENAI_TARGET,
            "aliases": {
                "gpt-4o": OPENAI_TARGET,
                "claude-sonnet-4-5": ANTHROPIC_TARGET,
                "deepseek-chat": DEEPSEEK_TARGET,
            },
        },
    )
    with GatewayThread(config) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook.load()


def long_text(chars: int) -> str:
    """Text no other test sends: the session's simulator (and its prompt cache) is shared."""
    return (uuid.uuid4().hex + " cache me if you can" * (chars // 20 + 1))[:chars]


def record_of(gw: GatewayThread, response: httpx.Response) -> InferenceRecord:
    assert response.status_code == 200, response.text
    record: InferenceRecord = gw.sink.wait_for(response.headers["x-request-id"])
    return record


def priced(book: PriceBook, gw: GatewayThread, record: InferenceRecord) -> float | None:
    """What the price book says the record's tokens cost on its target."""
    usage = Usage(
        record.prompt_tokens,
        record.completion_tokens,
        record.cached_tokens,
        record.cache_creation_tokens,
    )
    return book.cost_usd(gw.state.config.backends[record.route_target], usage)


def test_openai_repeated_prompt_is_recorded_with_cache_reads_and_priced_for_them(
    gw: GatewayThread, book: PriceBook
) -> None:
    content = long_text(6000)  # 1501 prompt tokens; 11 whole chunks of 128 cached on a repeat
    body: Any = {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}
    url = gw.base_url + "/v1/chat/completions"
    first = record_of(gw, httpx.post(url, json=body, timeout=30))
    second = record_of(gw, httpx.post(url, json=body, timeout=30))
    streamed = record_of(gw, httpx.post(url, json={**body, "stream": True}, timeout=30))

    assert first.route_target == second.route_target == OPENAI_TARGET
    assert first.prompt_tokens == second.prompt_tokens == len(content) // 4 + 1
    assert not first.cached_tokens
    for repeat in (second, streamed):
        assert repeat.cached_tokens == len(content) // 512 * 128 == 1408
        assert not repeat.cache_creation_tokens  # OpenAI writes its cache for free
        assert repeat.cost_usd is not None
        assert repeat.cost_usd == pytest.approx(priced(book, gw, repeat))
    assert first.cost_usd == pytest.approx(priced(book, gw, first))
    assert second.cost_usd is not None and first.cost_usd is not None
    assert second.cost_usd < first.cost_usd  # cached input is cheaper


def test_deepseek_cache_hits_are_read_from_its_own_usage_fields_and_priced_as_reads(
    gw: GatewayThread, book: PriceBook
) -> None:
    content = long_text(6000)
    body: Any = {"model": "deepseek-chat", "messages": [{"role": "user", "content": content}]}
    url = gw.base_url + "/v1/chat/completions"
    first = record_of(gw, httpx.post(url, json=body, timeout=30))
    repeat = httpx.post(url, json=body, timeout=30)
    second = record_of(gw, repeat)
    streamed = record_of(gw, httpx.post(url, json={**body, "stream": True}, timeout=30))

    # The pass-through hands the client DeepSeek's usage as it came.
    assert repeat.json()["usage"]["prompt_cache_hit_tokens"] == 1408
    assert first.route_target == DEEPSEEK_TARGET and not first.cached_tokens
    for record in (second, streamed):
        assert record.cached_tokens == 1408
        assert record.cost_usd is not None
        assert record.cost_usd == pytest.approx(priced(book, gw, record))
    assert first.cost_usd is not None and second.cost_usd is not None
    assert second.cost_usd < 0.3 * first.cost_usd  # DeepSeek bills a cache hit at a tenth

    # A Messages client of the same provider sees the reads where Anthropic puts them.
    messages: Any = {
        "model": "deepseek-chat",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": content}],
    }
    answer = httpx.post(gw.base_url + "/v1/messages", json=messages, timeout=30)
    record = record_of(gw, answer)
    assert answer.json()["usage"]["cache_read_input_tokens"] == record.cached_tokens == 1408


def test_anthropic_cache_control_writes_then_reads_and_is_priced_for_both(
    gw: GatewayThread, book: PriceBook
) -> None:
    system = long_text(6000)  # 1500 tokens up to the breakpoint
    question = "Summarise the design."
    body: Any = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "system": [{"type": "text", "text": system, "cache_control": EPHEMERAL}],
        "messages": [{"role": "user", "content": question}],
    }
    url = gw.base_url + "/v1/messages"
    headers = {"anthropic-version": "2023-06-01", "x-api-key": "sk-test"}
    written = record_of(gw, httpx.post(url, json=body, headers=headers, timeout=30))
    streamed = record_of(
        gw, httpx.post(url, json={**body, "stream": True}, headers=headers, timeout=30)
    )
    read = record_of(gw, httpx.post(url, json=body, headers=headers, timeout=30))

    total = (len(system) + len(question)) // 4 + 1  # every prompt token, as OpenAI counts them
    assert written.route_target == read.route_target == ANTHROPIC_TARGET
    assert written.prompt_tokens == streamed.prompt_tokens == read.prompt_tokens == total
    assert (written.cache_creation_tokens, written.cached_tokens or 0) == (1500, 0)
    for repeat in (streamed, read):
        assert (repeat.cached_tokens, repeat.cache_creation_tokens or 0) == (1500, 0)
    for record in (written, streamed, read):
        assert record.cost_usd is not None
        assert record.cost_usd == pytest.approx(priced(book, gw, record))
    assert written.cost_usd is not None and read.cost_usd is not None
    assert read.cost_usd < written.cost_usd  # a read costs a tenth of input, a write 1.25x


def test_anthropic_through_the_chat_door_keeps_cache_writes_apart(
    gw: GatewayThread, book: PriceBook
) -> None:
    """The chat door to Anthropic goes through litellm, whose OpenAI-shaped usage carries cache
    writes in ``prompt_tokens_details.cache_creation_tokens``."""
    system = long_text(6000)
    body: Any = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": system, "cache_control": EPHEMERAL}],
            },
            {"role": "user", "content": "hi"},
        ],
    }
    url = gw.base_url + "/v1/chat/completions"
    written = record_of(gw, httpx.post(url, json=body, timeout=30))
    read = record_of(gw, httpx.post(url, json=body, timeout=30))

    assert written.prompt_tokens == read.prompt_tokens == (len(system) + len("hi")) // 4 + 1
    assert (written.cache_creation_tokens, written.cached_tokens or 0) == (1500, 0)
    assert (read.cached_tokens, read.cache_creation_tokens or 0) == (1500, 0)
    for record in (written, read):
        assert record.cost_usd is not None
        assert record.cost_usd == pytest.approx(priced(book, gw, record))


def test_a_frontier_target_without_a_price_is_named_at_start_and_on_reload(
    frontier_sim: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "admin-secret")
    sim = frontier_sim.base_url
    backends: dict[str, Any] = {
        OPENAI_TARGET: {"kind": "litellm", "model": "openai/gpt-4o", "api_base": sim + "/v1"},
        "retired": {"kind": "litellm", "model": "anthropic/claude-retired-9", "api_base": sim},
    }
    config = gateway_config(sim, backends=backends, routing={"default": OPENAI_TARGET})
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    caplog.set_level(logging.WARNING, logger="gateway.routing.targets")

    def named() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "gateway.routing.targets"]

    with GatewayThread(config, config_path=path) as gw:
        assert len(named()) == 1
        assert "'retired'" in named()[0] and "anthropic/claude-retired-9" in named()[0]
        # Priced in the config now: the reload names nothing.
        backends["retired"]["input_usd_per_mtok"] = 3.0
        path.write_text(
            yaml.safe_dump(
                gateway_config(
                    sim, backends=backends, routing={"default": OPENAI_TARGET}
                ).model_dump(mode="json")
            )
        )
        caplog.clear()
        reloaded = httpx.post(
            gw.base_url + "/admin/reload", headers={"Authorization": "Bearer admin-secret"}
        )
        assert reloaded.status_code == 200
        assert named() == []
