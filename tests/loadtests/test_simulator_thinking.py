"""Extended thinking on the simulator's Messages endpoint, driven by the official Anthropic SDK:
signed thinking blocks, streamed and not, and Anthropic's checks of the blocks a client sends
back (a changed signature, a tool turn without its thinking block)."""

from __future__ import annotations

from typing import Any, cast

import anthropic
import pytest

from loadtests.frontier_sim.thinking import sign

LOOKUP_TOOL: Any = {
    "name": "lookup",
    "description": "Look a symbol up",
    "input_schema": {
        "type": "object",
        "properties": {"symbol": {"type": "string"}},
        "required": ["symbol"],
    },
}
THINKING: Any = {"type": "enabled", "budget_tokens": 2048}
ASK_TOOL: Any = [{"role": "user", "content": "Call the lookup tool for RecordWriter"}]


@pytest.fixture(scope="module")
def claude(frontier_sim: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=frontier_sim.base_url, api_key="sk-sim", max_retries=0)


def tool_turn(claude: anthropic.Anthropic) -> tuple[list[dict[str, Any]], str]:
    """A first turn that thinks, then calls the tool: the assistant's blocks as a client sends
    them back, and the tool call's id."""
    first = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        thinking=THINKING,
        tools=[LOOKUP_TOOL],
        messages=ASK_TOOL,
    )
    blocks = [b.model_dump(exclude_none=True) for b in first.content]
    tool_use = next(b for b in blocks if b["type"] == "tool_use")
    return blocks, tool_use["id"]


def answer_tools(
    claude: anthropic.Anthropic, blocks: list[dict[str, Any]], call_id: str
) -> anthropic.types.Message:
    """The second turn: the first turn's blocks sent back, then the tool's result."""
    result: Any = {"type": "tool_result", "tool_use_id": call_id, "content": "record.py:12"}
    return claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        thinking=THINKING,
        tools=[LOOKUP_TOOL],
        messages=[
            *ASK_TOOL,
            # The first turn's blocks, dumped from its content, as the SDK's block params.
            {"role": "assistant", "content": cast(list[anthropic.types.ContentBlockParam], blocks)},
            {"role": "user", "content": [result]},
        ],
    )


def test_thinking_comes_first_with_its_signature(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        thinking=THINKING,
        messages=[{"role": "user", "content": "Explain the cache"}],
    )
    first, answer = message.content
    assert first.type == "thinking" and answer.type == "text"
    assert first.thinking and first.signature == sign(first.thinking)
    plain = claude.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        messages=[{"role": "user", "content": "Explain the cache"}],
    )
    assert [b.type for b in plain.content] == ["text"]
    assert message.usage.output_tokens > plain.usage.output_tokens  # thinking is billed


def test_streamed_thinking_assembles_to_the_unary_block(claude: anthropic.Anthropic) -> None:
    body: Any = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "thinking": THINKING,
        "messages": [{"role": "user", "content": "Explain the stream"}],
    }
    with claude.messages.stream(**body) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    unary = claude.messages.create(**body)
    assert "thinking" in kinds and "signature" in kinds  # the SDK's names for the two deltas
    assert streamed.content[0].model_dump() == unary.content[0].model_dump()
    assert streamed.usage.output_tokens == unary.usage.output_tokens


def test_a_tool_turn_sent_back_unchanged_is_answered(claude: anthropic.Anthropic) -> None:
    blocks, call_id = tool_turn(claude)
    assert blocks[0]["type"] == "thinking"
    second = answer_tools(claude, blocks, call_id)
    assert second.content[0].type == "thinking"
    assert second.stop_reason in ("end_turn", "tool_use")


def test_a_changed_thinking_block_is_refused(claude: anthropic.Anthropic) -> None:
    blocks, call_id = tool_turn(claude)
    blocks[0] = {**blocks[0], "thinking": blocks[0]["thinking"] + " (edited)"}
    with pytest.raises(anthropic.BadRequestError, match="Invalid `signature` in `thinking` block"):
        answer_tools(claude, blocks, call_id)


def test_a_tool_turn_whose_thinking_was_dropped_is_refused(claude: anthropic.Anthropic) -> None:
    blocks, call_id = tool_turn(claude)
    with pytest.raises(anthropic.BadRequestError, match="must start with a thinking block"):
        answer_tools(claude, blocks[1:], call_id)


def test_a_budget_under_1024_tokens_is_refused(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        claude.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=4096,
            thinking={"type": "enabled", "budget_tokens": 512},
            messages=[{"role": "user", "content": "Explain the cache"}],
        )
