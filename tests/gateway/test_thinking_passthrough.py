"""Extended thinking with tools through the gateway's Messages door to an Anthropic target: the
real gateway in front of the frontier simulator, which signs its thinking blocks and refuses,
as Anthropic does, a tool turn sent back with a changed or missing thinking block. A client (the
official SDK, streaming as Claude Code does) runs two turns; the second is answered only if the
gateway passed the first turn's thinking block through unchanged, both ways."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import anthropic
import pytest
from anthropic.types.beta import BetaMessageParam

from loadtests.frontier_sim.thinking import sign
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.loadtests.test_simulator_thinking import LOOKUP_TOOL

TARGET = "anthropic-thinking"
BETA = "interleaved-thinking-2025-05-14"


@pytest.fixture(scope="module")
def gw(frontier_sim: Any) -> Iterator[GatewayThread]:
    sim = frontier_sim.base_url
    config = gateway_config(
        sim,
        backends={
            TARGET: {"kind": "litellm", "model": "anthropic/claude-sonnet-4-5", "api_base": sim}
        },
        routing={"default": TARGET, "aliases": {"claude-sonnet-4-5": TARGET, "auto": TARGET}},
    )
    with GatewayThread(config) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def client(gw: GatewayThread) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, api_key="sk-ant-client", max_retries=0)


def turn(client: anthropic.Anthropic, messages: Sequence[Mapping[str, Any]]) -> tuple[Any, str]:
    """One streamed turn: the final message and the gateway's request id."""
    with client.beta.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=8192,
        thinking={"type": "enabled", "budget_tokens": 4096},
        tools=[LOOKUP_TOOL],
        # The tests' message dicts, blocks sent back as the SDK dumped them.
        messages=cast(Sequence[BetaMessageParam], messages),
        betas=[BETA],
    ) as stream:
        return stream.get_final_message(), stream.response.headers["x-request-id"]


def test_a_thinking_tool_loop_runs_through_the_gateway(
    gw: GatewayThread, client: anthropic.Anthropic
) -> None:
    ask: Any = {"role": "user", "content": "Call the lookup tool for RecordWriter"}
    first, _ = turn(client, [ask])
    thought, call = first.content[0], first.content[-1]
    assert thought.type == "thinking" and thought.signature == sign(thought.thinking)
    assert call.type == "tool_use" and first.stop_reason == "tool_use"
    result: Any = {"type": "tool_result", "tool_use_id": call.id, "content": "writer.py:90"}
    assistant: Any = {"role": "assistant", "content": [b.model_dump() for b in first.content]}
    second, rid = turn(client, [ask, assistant, {"role": "user", "content": [result]}])
    assert second.content[0].type == "thinking"
    record = gw.sink.wait_for(rid)
    assert record.status == 200 and record.route_target == TARGET
    assert record.request["messages"][1]["content"][0]["signature"] == thought.signature
    assert record.response is not None
    assert record.response["content"][0]["signature"] == second.content[0].signature


def test_the_gateway_relays_the_providers_refusal_of_a_changed_thinking_block(
    client: anthropic.Anthropic,
) -> None:
    ask: Any = {"role": "user", "content": "Call the lookup tool for RecordWriter"}
    first, _ = turn(client, [ask])
    blocks = [b.model_dump() for b in first.content]
    blocks[0]["thinking"] += " (edited)"
    result: Any = {"type": "tool_result", "tool_use_id": blocks[-1]["id"], "content": "x"}
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature`"):
        turn(
            client,
            [ask, {"role": "assistant", "content": blocks}, {"role": "user", "content": [result]}],
        )


def test_an_alias_is_answered_under_its_own_name_so_clients_keep_the_thinking(
    gw: GatewayThread, client: anthropic.Anthropic
) -> None:
    """Claude Code strips signed thinking from a turn whose answer names another model than the
    one it asks for; asked for ``auto``, the answer says ``auto`` (streamed and not)."""
    ask: Any = {"role": "user", "content": "Call the lookup tool for RecordWriter"}
    with client.messages.stream(
        model="auto",
        max_tokens=8192,
        thinking={"type": "enabled", "budget_tokens": 4096},
        tools=[LOOKUP_TOOL],
        messages=[ask],
    ) as stream:
        streamed = stream.get_final_message()
        rid = stream.response.headers["x-request-id"]
    unary = client.messages.create(
        model="auto", max_tokens=8192, tools=[LOOKUP_TOOL], messages=[ask]
    )
    assert streamed.model == unary.model == "auto"
    record = gw.sink.wait_for(rid)
    assert record.served_model == "anthropic/claude-sonnet-4-5"
    assert record.response is not None and record.response["model"] == "auto"


def test_a_tool_turn_another_target_answered_is_accepted_with_thinking_off(
    gw: GatewayThread, client: anthropic.Anthropic
) -> None:
    """The tool turn came from the local model (its thinking block has no signature): Anthropic
    would refuse it; the gateway leaves the unsigned block out and turns thinking off for this
    request, as Anthropic's error says to, and notes it in the record."""
    local_turn: Any = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "Look it up.", "signature": ""},
            {"type": "tool_use", "id": "toolu_local1", "name": "lookup", "input": {"symbol": "x"}},
        ],
    }
    result: Any = {"type": "tool_result", "tool_use_id": "toolu_local1", "content": "x.py:3"}
    ask: Any = {"role": "user", "content": "Call the lookup tool for x"}
    answer, rid = turn(client, [ask, local_turn, {"role": "user", "content": [result]}])
    assert answer.content[0].type != "thinking"  # thought without: thinking was off
    record = gw.sink.wait_for(rid)
    assert record.status == 200
    assert "note.thinking_disabled" in record.tags
    assert "note.thinking_unsigned_dropped" in record.tags
    assert record.request["messages"][1] == local_turn  # the record keeps what the client sent
