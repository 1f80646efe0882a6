"""Input bounds and client mistakes: refused at the door in its own shape, never a 5xx, never
counted against a back-end's circuit breaker, and always recorded."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config import LimitsConfig
from gateway.errors import InvalidRequestError
from gateway.resilience import BreakerState
from gateway.wire.bounds import check_bounds
from loadtests.bench.sim_gateway import simulator_backends
from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator
from loadtests.hostile.case import DOOR_BODY_LIMIT
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.gateway.conftest import store_gateway
from traffic.store import InferenceFilter, InferenceRecord, StoreConfig, open_store

LIMITS = LimitsConfig()


def nested(depth: int, leaf: Any = "x") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _refusal(body: dict[str, Any]) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        check_bounds(body, LIMITS)
    return info.value


def test_bounds_name_the_deep_value_whatever_its_depth() -> None:
    for depth in (LIMITS.max_json_depth, 1_000, 100_000):
        err = _refusal({"model": "m", "metadata": {"a": nested(depth)}})
        assert err.code == "too_deep" and err.param is not None
        assert err.param.startswith("metadata.a[0][0]") and len(err.message) < 300
    check_bounds(
        {"messages": [{"role": "user", "content": nested(LIMITS.max_json_depth - 4)}]}, LIMITS
    )


def test_bounds_refuse_counts_and_sizes_beyond_the_limits() -> None:
    many = [{"role": "user", "content": "x"}] * (LIMITS.max_messages + 1)
    assert _refusal({"messages": many}).code == "too_many_messages"
    assert _refusal({"input": many}).param == "input"
    parts = [{"type": "text", "text": "x"}] * (LIMITS.max_content_parts + 1)
    err = _refusal(
        {"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": parts}]}
    )
    assert err.param == "messages[1].content" and err.code == "too_many_content_parts"
    tools = [{"type": "function", "function": {"name": "t"}}] * (LIMITS.max_tools + 1)
    assert _refusal({"tools": tools}).code == "too_many_tools"
    deep_schema = {"type": "function", "function": {"name": "t", "parameters": nested(40, {})}}
    err = _refusal({"tools": [deep_schema]})
    assert err.param is not None and err.param.startswith("tools[0].function.parameters")
    big = "x" * (LIMITS.max_string_chars + 1)
    assert _refusal({"messages": [{"role": "user", "content": big}]}).param == "messages[0].content"


def test_a_prompt_of_token_ids_is_one_prompt_not_a_batch() -> None:
    check_bounds({"prompt": list(range(LIMITS.max_messages * 3))}, LIMITS)
    assert _refusal({"prompt": ["p"] * (LIMITS.max_messages + 1)}).param == "prompt"


# --- the doors, on a real gateway recording into SQLite ----------------------------------------


@pytest.fixture
def recording(frontier_sim: Any, tmp_path: Path) -> Iterator[tuple[GatewayThread, str]]:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    try:
        yield gw, url
    finally:
        gw.stop()


def _records(url: str) -> list[InferenceRecord]:
    async def read() -> list[InferenceRecord]:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()
        try:
            return [r.inference async for r in backend.iter_inferences(InferenceFilter())]
        finally:
            await backend.close()

    return asyncio.run(read())


def _breakers_closed(gw: GatewayThread) -> bool:
    return all(b.state is BreakerState.CLOSED for b in gw.state.breakers.values())


DEEP = nested(300)
DOORS: list[tuple[str, dict[str, Any]]] = [
    (
        "/v1/chat/completions",
        {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": DEEP}]},
    ),
    (
        "/v1/chat/completions",
        {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "metadata": {"k": DEEP}},
    ),
    ("/v1/completions", {"model": "instruct", "prompt": "hi", "logit_bias": {"1": DEEP}}),
    ("/v1/responses", {"model": "gpt-4o-mini", "input": [{"role": "user", "content": DEEP}]}),
    (
        "/v1/responses",
        {
            "model": "gpt-4o-mini",
            "input": "hi",
            "tools": [{"type": "function", "name": "f", "parameters": nested(40, {})}],
        },
    ),
    (
        "/v1/messages",
        {
            "model": "claude-haiku-4-5",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": DEEP}],
        },
    ),
]


def test_deep_bodies_are_refused_at_every_door_and_recording_goes_on(
    recording: tuple[GatewayThread, str],
) -> None:
    gw, url = recording
    ids = []
    for path, body in DOORS:
        r = httpx.post(gw.base_url + path, json=body, timeout=30)
        assert r.status_code == 400, (path, r.text)
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error"
        if path != "/v1/messages":
            assert error["code"] == "too_deep" and error["param"]
        else:
            assert r.json()["type"] == "error"  # Anthropic's shape
        ids.append(r.headers["x-request-id"])
    count = httpx.post(
        gw.base_url + "/v1/messages/count_tokens",
        json={"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": DEEP}]},
    )
    assert count.status_code == 400 and count.json()["type"] == "error"
    ok = httpx.post(
        gw.base_url + "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "still here"}]},
        timeout=30,
    )
    assert ok.status_code == 200
    ids.append(ok.headers["x-request-id"])
    assert _breakers_closed(gw)
    gw.stop()
    records = {r.id: r for r in _records(url)}
    assert sorted(records) == sorted(ids), "every answered request has exactly one record"
    refused = records[ids[0]]
    assert refused.status == 400 and "_unparsed" in refused.request  # kept whole, as text


@pytest.mark.parametrize("prompt", [[[]], [], [-1], [[-1]], [1.5], ["a", 1]])
def test_bad_completion_prompts_are_400_and_never_open_the_breaker(
    gateway: GatewayThread, prompt: Any
) -> None:
    for _ in range(8):  # more than the breaker's failure threshold
        r = httpx.post(
            gateway.base_url + "/v1/completions",
            json={"model": "gpt-4o-mini", "prompt": prompt},
            timeout=30,
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert _breakers_closed(gateway)


def test_input_a_provider_cannot_translate_is_a_400_not_an_outage(gateway: GatewayThread) -> None:
    """litellm cannot send token ids to a chat model: its own failure, caused by the input."""
    for _ in range(8):
        r = httpx.post(
            gateway.base_url + "/v1/completions",
            json={"model": "gpt-4o-mini", "prompt": [1, 2, 3]},
            timeout=30,
        )
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "invalid_request_error"
    assert _breakers_closed(gateway)
    ok = httpx.post(
        gateway.base_url + "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert ok.status_code == 200


def test_an_upstream_4xx_passes_through_and_is_not_a_breaker_failure(
    frontier_sim: ThreadedSimulator,
) -> None:
    """A provider that takes bodies up to 1 MiB refuses a larger one with 413 (the simulator
    told so per request, as a provider with a smaller limit); the gateway's own limit is higher."""
    backends = simulator_backends(frontier_sim.base_url)
    backends["frontier-openai"]["extra_headers"] = {"x-sim-openai-max-body-bytes": "1048576"}
    body = {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "hi"}],
        "user": "u" * 3_000_000,
    }
    with GatewayThread(gateway_config(frontier_sim.base_url, backends=backends)) as gateway:
        for _ in range(8):
            r = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 413, r.text
            assert r.json()["error"]["type"] == "invalid_request_error"
        assert _breakers_closed(gateway)


def test_the_doors_take_what_the_providers_behind_them_take() -> None:
    """Each door's default body limit is at least its providers' own (the simulator's defaults
    are the providers' documented limits): a body a provider accepts is never refused first."""
    sim = SimulatorConfig()
    assert LIMITS.max_body_bytes.messages >= sim.anthropic_max_body_bytes
    for door in ("chat.completions", "completions", "responses"):
        assert LIMITS.max_body_bytes.for_endpoint(door) >= sim.openai_max_body_bytes
    # The hostile corpus's over-limit bodies are sized from the same defaults.
    for door, limit in DOOR_BODY_LIMIT.items():
        endpoint = {"chat": "chat.completions", "count_tokens": "messages"}.get(door, door)
        assert limit == LIMITS.max_body_bytes.for_endpoint(endpoint)
    # One number in the YAML still sets every door.
    assert LimitsConfig.model_validate({"max_body_bytes": 4096}).max_body_bytes.messages == 4096


def test_a_namespace_tool_without_a_tool_list_is_a_400(gateway: GatewayThread) -> None:
    for tools in ("not a list", {"a": 1}, 7):
        r = httpx.post(
            gateway.base_url + "/v1/responses",
            json={
                "model": "gpt-4o-mini",
                "input": "hi",
                "tools": [{"type": "namespace", "name": "ns", "tools": tools}],
            },
            timeout=30,
        )
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].tools"


@pytest.mark.parametrize(
    "tools",
    [["just a string"], [{"type": "namespace", "name": "ns", "tools": ["x", 3]}], [None]],
)
def test_odd_tool_shapes_on_the_responses_door_are_never_a_500(
    gateway: GatewayThread, tools: Any
) -> None:
    r = httpx.post(
        gateway.base_url + "/v1/responses",
        json={"model": "gpt-4o-mini", "input": "hi", "tools": tools},
        timeout=30,
    )
    assert r.status_code in (200, 400), r.text
