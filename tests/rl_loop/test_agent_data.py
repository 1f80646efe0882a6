"""A round's agent examples come from the frontier's accepted agent episodes of the recent record:
every assistant turn (tool calls included) of each, newest episodes first, capped; episodes the
local model touched, rejected ones and chat sessions judged turn by turn give none."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path

from rl_loop.agent_data import agent_sft_examples
from rl_loop.config import AgentDistillConfig, DataConfig
from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_episodes import PARIS, agent_rows
from traffic.store import InferenceRow, SqliteBackend

FRONTIER = "frontier-openai"


# The synthetic record's time: rounds cut off a day after it (the window reaches back 30 days).
ROUND_END = syn.EPOCH + timedelta(days=1)


async def _examples(
    tmp_path: Path, rows: list[InferenceRow], max_examples: int, until: datetime = ROUND_END
):
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await store.insert_inferences([r.inference for r in rows])
        await store.insert_feedback([f for r in rows for f in r.feedback])
        return await agent_sft_examples(
            store,
            AgentDistillConfig(max_examples=max_examples),
            DataConfig(eval_fraction=0.0),
            local_target="local",
            work_dir=tmp_path,
            until=until,
        )
    finally:
        await store.close()


def _chat_session() -> list[InferenceRow]:
    rows = [
        syn.chat_row(500 + i, f"question {i}", "answer", route_target=FRONTIER,
                     fb=[syn.feedback("accepted", 500 + i)])
        for i in range(3)
    ]  # fmt: skip
    return [
        dataclasses.replace(r, inference=dataclasses.replace(r.inference, episode_id="chat"))
        for r in rows
    ]


async def test_each_turn_of_the_frontiers_accepted_episodes_is_an_example(
    tmp_path: Path,
) -> None:
    rows = [
        *agent_rows(0, "ep-frontier", [PARIS], targets=[FRONTIER] * 2),
        *agent_rows(10, "ep-local", [PARIS], targets=["local", FRONTIER]),
        *agent_rows(20, "ep-rejected", [PARIS], targets=[FRONTIER] * 2, verdict="rejected"),
        *_chat_session(),
    ]
    examples, counts, dataset = await _examples(tmp_path, rows, max_examples=100)
    assert dataset is not None  # its lineage: both steps of the one episode taken
    assert dataset.lineage.ids() == sorted(r.inference.id for r in rows[:2])
    assert counts == {
        "agent_episodes": 3,
        "agent_episodes_withheld": 0,
        "agent_episodes_train": 1,
        "agent_sft": 2,
    }
    call, final = examples
    assert call.tools and call.tool_calls is not None
    assert call.tool_calls[0]["function"]["name"] == "get_weather"
    assert [m["role"] for m in call.prompt] == ["system", "user"]
    assert final.answer == "Sunny in Paris." and final.tool_calls is None
    assert [m["role"] for m in final.prompt] == ["system", "user", "assistant", "tool"]


async def test_the_newest_episodes_fill_the_cap(tmp_path: Path) -> None:
    rows = [
        *agent_rows(0, "ep-old", [PARIS], "Old answer.", targets=[FRONTIER] * 2),
        *agent_rows(10, "ep-new", [PARIS], "New answer.", targets=[FRONTIER] * 2),
    ]
    examples, counts, _ = await _examples(tmp_path, rows, max_examples=2)
    assert counts["agent_sft"] == 2
    assert [e.answer for e in examples if not e.tool_calls] == ["New answer."]


async def test_off_reads_nothing(tmp_path: Path) -> None:
    off = await _examples(tmp_path, agent_rows(0, "ep", [PARIS]), max_examples=0)
    assert off.examples == [] and off.counts == {} and off.dataset is None


async def test_episodes_older_than_the_window_are_not_read(tmp_path: Path) -> None:
    rows = agent_rows(0, "ep", [PARIS], targets=[FRONTIER] * 2)
    later = syn.EPOCH + timedelta(days=31)
    examples, counts, _ = await _examples(tmp_path, rows, max_examples=100, until=later)
    assert examples == [] and counts["agent_episodes"] == 0
