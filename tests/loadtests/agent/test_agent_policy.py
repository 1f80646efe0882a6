"""The simulator plays a competent agent: it solves every kind at success rate 1, makes the kind's
mistake at 0, repeats a broken call correctly, and reads the conversation in every wire format.

The agent client talks to the simulator directly here (its OpenAI chat and Responses routes);
the gateway's own paths are in ``test_agent_episodes.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from loadtests.agent.client import AgentClientConfig, run_agent_client
from loadtests.agent.run import main as run_main
from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from tasks.agent.tasks import AGENT_KINDS, make_agent_task
from tasks.agent.tools import chat_tools
from tasks.ide.clients import prompt_hash


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, ThreadedSimulator]]:
    started = {
        "competent": run_in_thread(SimulatorConfig(agent_success_rate=1.0)),
        "clumsy": run_in_thread(SimulatorConfig(agent_success_rate=0.0)),
        "sloppy": run_in_thread(
            SimulatorConfig(agent_success_rate=1.0, agent_invalid_call_rate=0.5)
        ),
    }
    try:
        yield started
    finally:
        for sim in started.values():
            sim.stop()


def _config(sim: ThreadedSimulator, **overrides: object) -> AgentClientConfig:
    return AgentClientConfig(
        gateway=sim.base_url, oracle_url=sim.base_url, model="gpt-4o", **overrides
    )


async def test_a_competent_agent_solves_every_kind_over_both_apis(
    sims: dict[str, ThreadedSimulator],
) -> None:
    tasks = [make_agent_task(kind, seed) for kind in AGENT_KINDS for seed in (21, 22)]
    stats = await run_agent_client(_config(sims["competent"], send_feedback=False), tasks)
    failed = [(e.task_id, e.verdict and e.verdict.feedback) for e in stats.episodes if not e.passed]
    assert not failed
    assert {(e.flavour, e.stream) for e in stats.episodes} == {
        ("chat", True), ("chat", False), ("responses", True), ("responses", False)
    }  # fmt: skip
    summary = stats.summary()
    assert summary["tool_call_validity"] == 1.0 and summary["failed_requests"] == 0
    assert all(e.ran_tests_after_last_change for e in stats.episodes)


async def test_an_agent_that_errs_fails_every_kind(sims: dict[str, ThreadedSimulator]) -> None:
    tasks = [make_agent_task(kind, 23) for kind in AGENT_KINDS]
    stats = await run_agent_client(_config(sims["clumsy"], send_feedback=False), tasks)
    assert [e.passed for e in stats.episodes] == [False] * len(AGENT_KINDS)
    assert all(e.final_text for e in stats.episodes)


async def test_a_broken_call_is_repeated_correctly(sims: dict[str, ThreadedSimulator]) -> None:
    tasks = [make_agent_task(kind, 24) for kind in ("fix_bug", "rename_symbol", "implement")]
    stats = await run_agent_client(_config(sims["sloppy"], send_feedback=False), tasks)
    summary = stats.summary()
    assert summary["success_rate"] == 1.0
    assert summary["tool_call_validity"] is not None and summary["tool_call_validity"] < 1.0
    invalid = [c for e in stats.episodes for s in e.steps for c in s.calls if c.status == "invalid"]
    assert invalid


def test_the_agent_reads_an_anthropic_conversation(sims: dict[str, ThreadedSimulator]) -> None:
    """The Messages wire (what a gateway sends an Anthropic frontier): tool_use and tool_result
    blocks tell the agent where it is."""
    sim = sims["competent"]
    task = make_agent_task("fix_bug", 25)
    entry = {"prompt_hash": prompt_hash(task.prompt), "task_id": task.task_id}
    assert httpx.post(sim.base_url + "/sim/oracle", json=entry).status_code == 200
    tools = [
        {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
        for t in chat_tools("chat")
    ]
    messages: list[dict[str, object]] = [{"role": "user", "content": task.prompt}]
    names = []
    for _ in range(6):
        body = {"model": "claude-x", "max_tokens": 1024, "tools": tools, "messages": messages}
        answer = httpx.post(sim.base_url + "/v1/messages", json=body).json()
        block = answer["content"][0]
        if block["type"] != "tool_use":
            break
        names.append(block["name"])
        messages.append({"role": "assistant", "content": [block]})
        result = "1 failed" if block["name"] == "run_tests" and len(names) == 1 else "ok"
        messages.append(
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": block["id"], "content": result}
            ]}
        )  # fmt: skip
    assert names == ["run_tests", "read_file", "edit", "run_tests"]
    assert json.dumps(messages[-2]["content"]).count(task.test_paths[0]) == 1


def test_the_command_line_runs_episodes_and_prints_their_figures(
    sims: dict[str, ThreadedSimulator], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    sim = sims["competent"]
    out = tmp_path / "episodes.jsonl"
    argv = ["--gateway", sim.base_url, "--oracle-url", sim.base_url, "--episodes", "2",
            "--kinds", "find_definition,add_import", "--no-send-feedback",
            "--episodes-out", str(out)]  # fmt: skip
    assert run_main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["total"]["episodes"] == 2 and report["total"]["success_rate"] == 1.0
    assert set(report["by_api"]) == {"chat", "responses"}
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["passed"] for line in lines] == [True, True]
