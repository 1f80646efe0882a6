"""The frontier simulator, driven by the official OpenAI and Anthropic SDKs over loopback."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from loadtests.frontier_sim import SimulatorConfig, SimulatorServer, run_in_thread
from loadtests.frontier_sim.__main__ import build_parser

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "days", "unit"],
        },
    },
}
LOOKUP_TOOL: Any = {
    "name": "lookup",
    "description": "Look a symbol up",
    "input_schema": {
        "type": "object",
        "properties": {"symbol": {"type": "string"}, "exact": {"type": "boolean"}},
        "required": ["symbol", "exact"],
    },
}
HELLO: Any = [{"role": "user", "content": "Explain the cache"}]


@pytest.fixture(scope="module")
def oai(frontier_sim) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{frontier_sim.base_url}/v1", api_key="sk-sim", max_retries=0)


@pytest.fixture(scope="module")
def claude(frontier_sim) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=frontier_sim.base_url, api_key="sk-sim", max_retries=0)


def sse_lines(frontier_sim, path: str, body: dict[str, Any], **headers: str) -> list[str]:
    with httpx.stream("POST", frontier_sim.base_url + path, json=body, headers=headers) as r:
        assert r.status_code == 200
        return [line for line in r.iter_lines() if line]


# OpenAI chat completions


def test_chat_answer_is_deterministic_and_counts_one_token_per_word(oai):
    first = oai.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    second = oai.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    other = oai.chat.completions.create(model="gpt-4o-mini", messages=HELLO, seed=7)
    text = first.choices[0].message.content
    assert first.id.startswith("chatcmpl-") and first.object == "chat.completion"
    assert first.model == "gpt-4o-mini"
    assert text.startswith("Simulated answer from gpt-4o-mini: ")
    assert text == second.choices[0].message.content != other.choices[0].message.content
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.completion_tokens == len(text.split()) == 16
    assert first.usage.total_tokens == first.usage.prompt_tokens + 16


def test_chat_honours_n_max_tokens_and_stop(oai):
    many = oai.chat.completions.create(model="gpt-4o", messages=HELLO, n=3)
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert len({c.message.content for c in many.choices}) == 3
    short = oai.chat.completions.create(model="gpt-4o", messages=HELLO, max_completion_tokens=5)
    assert short.choices[0].finish_reason == "length"
    first_words = many.choices[0].message.content.split()[:5]
    assert short.choices[0].message.content == " ".join(first_words)
    stopped = oai.chat.completions.create(model="gpt-4o", messages=HELLO, stop=["from"])
    assert stopped.choices[0].message.content == "Simulated answer"
    assert stopped.choices[0].finish_reason == "stop"


def test_chat_stream_yields_role_content_usage_then_done(oai, frontier_sim):
    expected = oai.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    stream = oai.chat.completions.create(
        model="gpt-4o-mini",
        messages=HELLO,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content == expected.choices[0].message.content
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 16
    lines = sse_lines(
        frontier_sim, "/v1/chat/completions", {"model": "m", "messages": HELLO, "stream": True}
    )
    assert lines[-1] == "data: [DONE]"
    assert all('"usage"' not in line for line in lines)


def test_tool_call_is_streamed_and_assembled_by_the_sdk(oai):
    messages = [{"role": "user", "content": "Use a tool to get the weather in Paris"}]
    with oai.chat.completions.stream(
        model="gpt-4o", messages=messages, tools=[WEATHER_TOOL]
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "sim-city", "days": 1, "unit": "celsius"}


def test_tool_choice_forces_a_call_and_a_tool_result_gets_text(oai):
    forced = oai.chat.completions.create(
        model="gpt-4o",
        messages=HELLO,
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    call = forced.choices[0].message.tool_calls[0]
    assert forced.choices[0].finish_reason == "tool_calls"
    no_keyword = oai.chat.completions.create(model="gpt-4o", messages=HELLO, tools=[WEATHER_TOOL])
    assert no_keyword.choices[0].message.tool_calls is None
    answer = oai.chat.completions.create(
        model="gpt-4o",
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "user", "content": "call the weather tool"},
            forced.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21C"},
        ],
    )
    assert answer.choices[0].finish_reason == "stop"
    assert "sunny, 21C" in answer.choices[0].message.content


# OpenAI legacy completions and models


def test_completion_appends_suffix_and_echoes_prompt(oai):
    plain = oai.completions.create(model="gpt-4o-mini", prompt="def add(a, b):")
    assert plain.object == "text_completion"
    assert plain.choices[0].text.startswith("Simulated answer from gpt-4o-mini:")
    both = oai.completions.create(
        model="gpt-4o-mini", prompt="def add(a, b):", suffix="\n# end", echo=True, max_tokens=4
    )
    text = both.choices[0].text
    assert text == "def add(a, b):Simulated answer from gpt-4o-mini:\n# end"
    assert both.choices[0].finish_reason == "length" and both.usage.completion_tokens == 4
    streamed = oai.completions.create(
        model="gpt-4o-mini", prompt="def add(a, b):", suffix="\n# end", stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == plain.choices[0].text + "\n# end"


def test_models_lists_the_configured_names(oai, claude):
    ids = [m.id for m in oai.models.list()]
    assert ids == list(SimulatorConfig().models)
    assert [m.id for m in claude.models.list()] == ids


# Anthropic Messages


def test_anthropic_message_with_system_blocks(claude):
    message = claude.messages.create(
        model="claude-3-5-sonnet-latest",
        max_tokens=100,
        system=[{"type": "text", "text": "You are terse."}],
        messages=HELLO,
    )
    assert message.id.startswith("msg_") and message.type == "message"
    assert message.content[0].text.startswith("Simulated answer from claude-3-5-sonnet-latest:")
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.output_tokens == 16 and message.usage.input_tokens > 0
    capped = claude.messages.create(model="claude-3-5-haiku-latest", max_tokens=3, messages=HELLO)
    assert capped.stop_reason == "max_tokens" and capped.usage.output_tokens == 3
    stopped = claude.messages.create(
        model="claude-3-5-haiku-latest", max_tokens=100, messages=HELLO, stop_sequences=["from"]
    )
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", "from")


def test_anthropic_stream_text_matches_the_plain_answer(claude, frontier_sim):
    plain = claude.messages.create(model="claude-3-5-sonnet-latest", max_tokens=64, messages=HELLO)
    with claude.messages.stream(
        model="claude-3-5-sonnet-latest", max_tokens=64, messages=HELLO
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == plain.content[0].text == final.content[0].text
    assert final.usage.output_tokens == 16 and final.stop_reason == "end_turn"
    body = {"model": "claude-3-5-sonnet-latest", "max_tokens": 64, "messages": HELLO}
    lines = sse_lines(frontier_sim, "/v1/messages?beta=true", {**body, "stream": True})
    events = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    assert events[:3] == ["message_start", "content_block_start", "ping"]
    assert events[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(events[3:-3]) == {"content_block_delta"}


def test_anthropic_tool_use_streams_input_json_and_round_trips(claude):
    messages = [{"role": "user", "content": "Please call the lookup tool"}]
    stream = claude.messages.create(
        model="claude-3-5-sonnet-latest",
        max_tokens=64,
        messages=messages,
        tools=[LOOKUP_TOOL],
        stream=True,
    )
    events = list(stream)
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert deltas and all(d.type == "input_json_delta" for d in deltas)
    assert json.loads("".join(d.partial_json for d in deltas)) == {
        "symbol": "sim-symbol",
        "exact": True,
    }
    tool_use = claude.messages.create(
        model="claude-3-5-sonnet-latest", max_tokens=64, messages=messages, tools=[LOOKUP_TOOL]
    )
    block = tool_use.content[0]
    assert tool_use.stop_reason == "tool_use" and block.type == "tool_use"
    assert block.id.startswith("toolu_") and block.name == "lookup"
    result = [{"type": "tool_result", "tool_use_id": block.id, "content": "found in cache.py"}]
    follow_up = claude.messages.create(
        model="claude-3-5-sonnet-latest",
        max_tokens=64,
        tools=[LOOKUP_TOOL],
        messages=[
            *messages,
            {"role": "assistant", "content": [block.model_dump()]},
            {"role": "user", "content": result},
        ],
    )
    assert follow_up.stop_reason == "end_turn"
    assert "found in cache.py" in follow_up.content[0].text


def test_anthropic_tool_choice_any_forces_a_call(claude):
    message = claude.messages.create(
        model="claude-3-5-haiku-latest",
        max_tokens=64,
        messages=HELLO,
        tools=[LOOKUP_TOOL],
        tool_choice={"type": "any"},
    )
    assert message.content[0].type == "tool_use"


# Failures


def test_error_model_fails_with_500_in_each_wire_shape(oai, claude):
    with pytest.raises(openai.InternalServerError) as oai_error:
        oai.chat.completions.create(model="sim-error", messages=HELLO)
    assert oai_error.value.status_code == 500
    assert oai_error.value.response.json()["error"]["type"] == "server_error"
    with pytest.raises(anthropic.InternalServerError) as claude_error:
        claude.messages.create(model="sim-error", max_tokens=10, messages=HELLO)
    assert claude_error.value.response.json()["error"]["type"] == "api_error"


def test_ratelimit_model_answers_429_with_retry_after(oai, claude):
    with pytest.raises(openai.RateLimitError) as oai_error:
        oai.chat.completions.create(model="sim-ratelimit", messages=HELLO)
    assert oai_error.value.response.headers["retry-after"] == "1"
    assert oai_error.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    with pytest.raises(anthropic.RateLimitError) as claude_error:
        claude.messages.create(model="claude-ratelimit", max_tokens=10, messages=HELLO)
    assert claude_error.value.response.headers["retry-after"] == "1"
    assert claude_error.value.response.json()["error"]["type"] == "rate_limit_error"


def test_sim_error_header_fails_one_request_with_its_status(oai, claude):
    with pytest.raises(openai.InternalServerError) as oai_error:
        oai.chat.completions.create(
            model="gpt-4o", messages=HELLO, extra_headers={"x-sim-error": "503"}
        )
    assert oai_error.value.status_code == 503
    with pytest.raises(anthropic.InternalServerError) as claude_error:
        claude.messages.create(
            model="claude-3-5-sonnet-latest",
            max_tokens=10,
            messages=HELLO,
            extra_headers={"x-sim-error": "529"},
        )
    assert claude_error.value.response.json()["error"]["type"] == "overloaded_error"
    assert oai.chat.completions.create(model="gpt-4o", messages=HELLO).choices


def test_malformed_json_and_bad_knobs_answer_400(frontier_sim):
    headers = {"content-type": "application/json"}
    chat = httpx.post(f"{frontier_sim.base_url}/v1/chat/completions", content=b"{", headers=headers)
    assert chat.status_code == 400
    assert chat.json()["error"]["type"] == "invalid_request_error"
    messages = httpx.post(f"{frontier_sim.base_url}/v1/messages", content=b"[1,", headers=headers)
    assert messages.status_code == 400
    assert messages.json() == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": messages.json()["error"]["message"]},
    }
    body = {"model": "gpt-4o", "messages": HELLO}
    for header in ({"x-sim-ttft-ms": "soon"}, {"x-sim-nonsense": "1"}):
        bad = httpx.post(f"{frontier_sim.base_url}/v1/chat/completions", json=body, headers=header)
        assert bad.status_code == 400, header
    missing = httpx.post(f"{frontier_sim.base_url}/v1/messages", json=body)
    assert missing.status_code == 400 and "max_tokens" in missing.json()["error"]["message"]


def test_cut_stream_closes_the_connection_without_done(frontier_sim, oai):
    body = {"model": "gpt-4o", "messages": HELLO, "stream": True}
    seen: list[str] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST",
            f"{frontier_sim.base_url}/v1/chat/completions",
            json=body,
            headers={"x-sim-cut-stream-after-chunks": "3"},
        ) as response,
    ):
        seen.extend(line for line in response.iter_lines() if line)
    assert len(seen) == 3 and "data: [DONE]" not in seen
    with pytest.raises((httpx.RemoteProtocolError, openai.APIError)):
        list(
            oai.chat.completions.create(
                model="gpt-4o",
                messages=HELLO,
                stream=True,
                extra_headers={"x-sim-cut-stream-after-chunks": "2"},
            )
        )


# Knobs, prices and stats


def test_latency_knobs_delay_the_answer(frontier_sim):
    body = {"model": "gpt-4o", "messages": HELLO, "stream": True}
    started = time.perf_counter()
    sse_lines(frontier_sim, "/v1/chat/completions", body, **{"x-sim-ttft-ms": "150"})
    assert time.perf_counter() - started >= 0.15
    started = time.perf_counter()
    lines = sse_lines(
        frontier_sim,
        "/v1/chat/completions",
        body,
        **{"x-sim-tokens-per-s": "200", "x-sim-answer-tokens": "20"},
    )
    assert len(lines) == 20 + 3  # role chunk, words, finish chunk, [DONE]
    assert time.perf_counter() - started >= 21 / 200


def test_cost_header_and_prices_follow_the_price_knobs(frontier_sim, oai):
    raw = oai.chat.completions.with_raw_response.create(model="gpt-4o", messages=HELLO)
    completion = raw.parse()
    prices = httpx.get(f"{frontier_sim.base_url}/sim/prices").json()
    expected = (
        completion.usage.prompt_tokens * prices["input_usd_per_mtok"]
        + completion.usage.completion_tokens * prices["output_usd_per_mtok"]
    ) / 1e6
    assert float(raw.headers["x-sim-cost-usd"]) == pytest.approx(expected)


def test_stats_count_requests_errors_and_models(frontier_sim, oai):
    before = httpx.get(f"{frontier_sim.base_url}/sim/stats").json()
    oai.chat.completions.create(model="stats-probe", messages=HELLO)
    with pytest.raises(openai.InternalServerError):
        oai.chat.completions.create(model="stats-error", messages=HELLO)
    after = httpx.get(f"{frontier_sim.base_url}/sim/stats").json()
    assert (
        after["requests"]["chat_completions"] == before["requests"].get("chat_completions", 0) + 2
    )
    assert after["errors"]["chat_completions"] == before["errors"].get("chat_completions", 0) + 1
    assert after["models"]["stats-probe"] == 1
    assert httpx.get(f"{frontier_sim.base_url}/health").status_code == 200


# Runners and CLI


async def test_async_server_applies_its_own_config():
    config = SimulatorConfig(
        cut_stream_after_chunks=1, slow_model_ttft_ms=100, reject_unknown_models=True
    )
    async with SimulatorServer(config, port=0) as sim:
        assert sim.base_url.startswith("http://127.0.0.1:")
        client = openai.AsyncOpenAI(base_url=f"{sim.base_url}/v1", api_key="x", max_retries=0)
        started = time.perf_counter()
        await client.chat.completions.create(model="sim-local", messages=HELLO)
        with pytest.raises(openai.NotFoundError):
            await client.chat.completions.create(model="sim-slow", messages=HELLO)
        assert time.perf_counter() - started < 1
        with pytest.raises((httpx.RemoteProtocolError, openai.APIError)):
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=HELLO, stream=True
            )
            _ = [chunk async for chunk in stream]
        await client.close()
        assert sim.stats.requests["chat_completions"] == 3


def test_threaded_server_draws_errors_from_a_seeded_rng():
    outcomes = []
    for _ in range(2):
        with run_in_thread(SimulatorConfig(error_rate=0.5, error_status=502, seed=3)) as sim:
            statuses = [
                httpx.post(
                    f"{sim.base_url}/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": HELLO},
                ).status_code
                for _ in range(20)
            ]
        outcomes.append(statuses)
    assert outcomes[0] == outcomes[1]
    assert set(outcomes[0]) == {200, 502}


def test_cli_flags_default_to_the_config_model():
    args = vars(build_parser().parse_args(["--ttft-ms", "5", "--models", "a", "b"]))
    assert (args.pop("host"), args.pop("port")) == ("127.0.0.1", 8901)
    config = SimulatorConfig.model_validate(args)
    assert config.ttft_ms == 5 and config.models == ("a", "b")
    assert config.answer_tokens == SimulatorConfig().answer_tokens
