"""The simulated IDE client against a real gateway whose frontier is the simulator's oracle."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from loadtests.frontier_sim import RequestView, SimulatorConfig, compose_answer, run_in_thread
from loadtests.frontier_sim.oracle import oracle_answer
from loadtests.frontier_sim.runner import ThreadedSimulator
from loadtests.ide_client import IdeClientConfig, build_parser, run_ide_client
from loadtests.tasks import sample_tasks, verify_reply
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config

ORACLE_ACCURACY = 0.8


def _view(text: str, seed: int | None = None) -> RequestView:
    return RequestView(model="gpt-4o-mini", prompt_tokens=10, last_user_text=text, seed=seed)


def test_oracle_answers_at_its_configured_rate() -> None:
    tasks = sample_tasks(200, seed=7)
    config = SimulatorConfig(oracle_accuracy=0.9)
    replies = [compose_answer(_view(t.user_prompt()), config) for t in tasks]
    right = sum(r == t.reference_reply for r, t in zip(replies, tasks, strict=True))
    wrong = sum(r == t.wrong_reply for r, t in zip(replies, tasks, strict=True))
    assert right + wrong == len(tasks)
    assert 0.84 <= right / len(tasks) <= 0.96
    assert replies == [compose_answer(_view(t.user_prompt()), config) for t in tasks]
    perfect = SimulatorConfig(oracle_accuracy=1.0)
    assert all(compose_answer(_view(t.user_prompt()), perfect) == t.reference_reply for t in tasks)


def test_oracle_ignores_prompts_without_a_task_marker() -> None:
    task = sample_tasks(1, seed=2)[0]
    plain = compose_answer(_view(task.user_prompt(marker=False)), SimulatorConfig())
    assert plain.startswith("Simulated answer from")
    off = compose_answer(_view(task.user_prompt()), SimulatorConfig(oracle=False))
    assert off.startswith("Simulated answer from")
    unknown = compose_answer(_view("# task: no_such_family:3\nhi"), SimulatorConfig())
    assert unknown.startswith("Simulated answer from")


def test_oracle_over_http_keeps_code_layout(frontier_sim: Any) -> None:
    client = openai.OpenAI(base_url=f"{frontier_sim.base_url}/v1", api_key="sk", max_retries=0)
    task = next(t for t in sample_tasks(40, seed=5) if t.answer_format == "code")
    messages: Any = task.messages()
    for accuracy, expected in (("1", task.reference_reply), ("0", task.wrong_reply)):
        headers = {"x-sim-oracle-accuracy": accuracy}
        done = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, extra_headers=headers
        )
        assert done.choices[0].message.content == expected
        chunks = client.chat.completions.create(
            model="gpt-4o-mini", messages=messages, stream=True, extra_headers=headers
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == expected


@pytest.fixture(scope="module")
def oracle_sim() -> Iterator[ThreadedSimulator]:
    sim = run_in_thread(SimulatorConfig(oracle_accuracy=ORACLE_ACCURACY))
    try:
        yield sim
    finally:
        sim.stop()


def _gateway(sim: ThreadedSimulator, db: Path) -> GatewayThread:
    store = {"enabled": True, "url": f"sqlite:///{db}", "spool_dir": str(db.parent / "spool")}
    return GatewayThread(gateway_config(sim.base_url, store=store), use_store=True).start()


def test_ide_client_through_gateway_posts_feedback(
    oracle_sim: ThreadedSimulator, tmp_path: Path
) -> None:
    db = tmp_path / "traffic.db"
    gateway = _gateway(oracle_sim, db)
    try:
        config = IdeClientConfig(
            base_url=gateway.base_url, n=40, seed=11, model="gpt-4o-mini", edit_share=1.0
        )
        stats = asyncio.run(run_ide_client(config))
        local = asyncio.run(
            run_ide_client(IdeClientConfig(base_url=gateway.base_url, n=6, seed=12, edit_share=0))
        )
    finally:
        gateway.stop()
    total = stats.total()
    assert total.sent == 40 and total.errors == 0
    assert total.accepted + total.rejected == 40
    # The oracle's draw per task is deterministic (no request seed: salt "None|0"), so the client
    # must accept exactly the tasks the oracle answered right, and reject the others.
    config_at = SimulatorConfig(oracle_accuracy=ORACLE_ACCURACY)
    intended = [
        verify_reply(t, oracle_answer(t.user_prompt(), config_at, "None|0") or "").passed
        for t in sample_tasks(40, 11, "train")
    ]
    assert total.accepted == sum(intended) and 0 < sum(intended) < 40
    assert total.rejected > 0 and total.edited == total.rejected  # edit_share=1.0
    assert dict(total.targets) == {"frontier-openai": 40}
    assert total.latency_p50_ms is not None and total.latency_p50_ms > 0
    assert json.loads(json.dumps(stats.as_dict()))["total"]["sent"] == 40
    assert stats.feedback_failed == 0
    assert stats.feedback_posted == 40 + total.edited
    assert local.total().targets["local"] == 6  # default route of the test gateway

    rows = sqlite3.connect(db)
    kinds = dict(rows.execute("SELECT kind, COUNT(*) FROM feedback GROUP BY kind").fetchall())
    assert kinds.get("accepted", 0) == total.accepted + local.total().accepted
    assert kinds.get("edited", 0) == total.edited
    edited = rows.execute("SELECT payload FROM feedback WHERE kind = ?", ("edited",))
    edits = [json.loads(payload) for (payload,) in edited]
    assert all(e["text"].startswith("```") or "\n" not in e["text"] for e in edits)
    tags = [json.loads(t) for (t,) in rows.execute("SELECT tags FROM inference")]
    assert all({"family", "task_id"} <= set(t) for t in tags)
    episodes = {e for (e,) in rows.execute("SELECT episode_id FROM inference")}
    assert "ide-11-train-0" in episodes


def test_feedback_failures_are_counted_without_a_store(
    oracle_sim: ThreadedSimulator,
) -> None:
    gateway = GatewayThread(gateway_config(oracle_sim.base_url)).start()
    try:
        config = IdeClientConfig(base_url=gateway.base_url, n=3, seed=1, model="gpt-4o-mini")
        stats = asyncio.run(run_ide_client(config))
    finally:
        gateway.stop()
    assert stats.total().sent == 3
    assert stats.feedback_posted == 0 and stats.feedback_failed >= 3
    assert stats.last_feedback_error is not None and stats.last_feedback_error.startswith("404")


def test_cli_flags_come_from_the_config() -> None:
    args = build_parser().parse_args(["--base-url", "http://x", "--n", "5", "--no-task-marker"])
    config = IdeClientConfig(**vars(args))
    assert config.n == 5 and not config.task_marker and config.concurrency == 4
    with pytest.raises(ValueError, match="concurrency"):
        IdeClientConfig(base_url="http://x", concurrency=0)
