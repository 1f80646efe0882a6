"""The frontier simulator's oracle channel: tasks registered by prompt hash, over loopback HTTP.

The gateway never sees this channel: the IDE client registers a task with the simulator
directly, and the simulator recognises the prompt by the hash of its user message's text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from loadtests.frontier_sim import OracleBook, SimulatorConfig, run_in_thread
from loadtests.frontier_sim.oracle import oracle_answer
from loadtests.frontier_sim.runner import ThreadedSimulator
from tasks.ide import Task, client_profile, prompt_hash, sample_tasks

DEFAULT_PREFIX = "Simulated answer from"


def _register(sim: ThreadedSimulator, entries: Any) -> httpx.Response:
    return httpx.post(f"{sim.base_url}/sim/oracle", json=entries, timeout=10)


def _entry(task: Task, text: str | None = None) -> dict[str, str]:
    return {"prompt_hash": prompt_hash(text or task.user_prompt()), "task_id": task.task_id}


def _client(sim: ThreadedSimulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{sim.base_url}/v1", api_key="sk", max_retries=0)


def _ask(client: openai.OpenAI, messages: Any, **kwargs: Any) -> Any:
    return client.chat.completions.create(model="gpt-4o-mini", messages=messages, **kwargs)


@pytest.fixture()
def small_sim() -> Iterator[ThreadedSimulator]:
    """A simulator of its own: these tests clear and overflow its oracle book."""
    sim = run_in_thread(SimulatorConfig(oracle_capacity=2))
    try:
        yield sim
    finally:
        sim.stop()


def test_simulator_answers_a_registered_task_at_its_configured_accuracy(frontier_sim: Any) -> None:
    tasks = sample_tasks(120, seed=7)
    assert _register(frontier_sim, [_entry(t) for t in tasks]).json()["registered"] >= 120
    client = _client(frontier_sim)
    headers = {"x-sim-oracle-accuracy": "0.9"}
    replies = [
        _ask(client, t.messages(), extra_headers=headers).choices[0].message.content for t in tasks
    ]
    right = sum(r == t.reference_reply for r, t in zip(replies, tasks, strict=True))
    wrong = sum(r == t.wrong_reply for r, t in zip(replies, tasks, strict=True))
    assert right + wrong == len(tasks)
    assert 0.82 <= right / len(tasks) <= 0.97
    # The draw is seeded (simulator seed, request seed and choice, task id): reproducible.
    book = OracleBook(len(tasks))
    book.register_all((e["prompt_hash"], e["task_id"]) for e in map(_entry, tasks))
    config = SimulatorConfig(oracle_accuracy=0.9)
    assert replies == [oracle_answer(t.user_prompt(), config, book, "None|0") for t in tasks]
    perfect = {"x-sim-oracle-accuracy": "1"}
    for task in tasks[:20]:
        done = _ask(client, task.messages("agent"), extra_headers=perfect)
        assert done.choices[0].message.content == task.reference_reply


def test_simulator_answers_an_unregistered_prompt_with_its_default_answer(
    small_sim: ThreadedSimulator,
) -> None:
    task = sample_tasks(1, seed=2)[0]
    client = _client(small_sim)
    first = _ask(client, task.messages()).choices[0].message.content
    assert first is not None and first.startswith(DEFAULT_PREFIX)
    assert _register(small_sim, _entry(task)).json() == {"registered": 1, "capacity": 2}
    assert _ask(client, task.messages()).choices[0].message.content in (
        task.reference_reply,
        task.wrong_reply,
    )
    edited = [task.messages()[0], {"role": "user", "content": task.user_prompt() + " Thanks!"}]
    other = _ask(client, edited).choices[0].message.content
    assert other is not None and other.startswith(DEFAULT_PREFIX)
    assert httpx.delete(f"{small_sim.base_url}/sim/oracle").json()["registered"] == 0
    again = _ask(client, task.messages()).choices[0].message.content
    assert again == first


def test_oracle_off_answers_registered_prompts_with_the_default_answer() -> None:
    task = sample_tasks(1, seed=3)[0]
    book = OracleBook(4)
    book.register(prompt_hash(task.user_prompt()), task.task_id)
    assert oracle_answer(task.user_prompt(), SimulatorConfig(), book) is not None
    assert oracle_answer(task.user_prompt(), SimulatorConfig(oracle=False), book) is None
    assert oracle_answer(task.user_prompt(), SimulatorConfig(), None) is None


def test_oracle_book_forgets_the_oldest_registration_past_its_capacity(
    small_sim: ThreadedSimulator,
) -> None:
    tasks = sample_tasks(3, seed=4)
    for task in tasks:
        assert _register(small_sim, _entry(task)).status_code == 200
    assert httpx.get(f"{small_sim.base_url}/sim/oracle").json()["registered"] == 2
    client = _client(small_sim)
    answers = [_ask(client, t.messages()).choices[0].message.content or "" for t in tasks]
    assert answers[0].startswith(DEFAULT_PREFIX)
    assert not any(a.startswith(DEFAULT_PREFIX) for a in answers[1:])


def test_malformed_registrations_are_refused_whole(small_sim: ThreadedSimulator) -> None:
    good = _entry(sample_tasks(1, seed=5)[0])
    for bad in (
        {"prompt_hash": "abc", "task_id": good["task_id"]},
        {"prompt_hash": good["prompt_hash"], "task_id": "no_such_family:3"},
        {"prompt_hash": good["prompt_hash"], "task_id": "nonsense"},
        {"prompt_hash": good["prompt_hash"]},
        [good, "not an object"],
    ):
        response = _register(small_sim, bad)
        assert response.status_code == 400, bad
        assert "oracle registration" in response.json()["error"]["message"]
    assert httpx.get(f"{small_sim.base_url}/sim/oracle").json()["registered"] == 0


def test_registered_task_is_answered_in_text_although_the_agent_offers_tools(
    frontier_sim: Any,
) -> None:
    task = sample_tasks(1, seed=6)[0]
    # "tool" in the user text makes the simulator call a tool, unless the oracle knows the prompt.
    text = task.user_prompt() + " Do not call a tool."
    messages: Any = [task.messages("agent")[0], {"role": "user", "content": text}]
    tools: Any = [dict(tool) for tool in client_profile("agent").tools]
    client = _client(frontier_sim)
    before = _ask(client, messages, tools=tools).choices[0].message
    assert before.tool_calls and before.tool_calls[0].function.name == "read_file"
    _register(frontier_sim, _entry(task, text))
    after = _ask(client, messages, tools=tools, extra_headers={"x-sim-oracle-accuracy": "1"})
    assert not after.choices[0].message.tool_calls
    assert after.choices[0].message.content == task.reference_reply


def test_oracle_over_http_keeps_code_layout(frontier_sim: Any) -> None:
    client = _client(frontier_sim)
    task = next(t for t in sample_tasks(40, seed=5) if t.answer_format == "code")
    _register(frontier_sim, _entry(task))
    messages: Any = task.messages()
    for accuracy, expected in (("1", task.reference_reply), ("0", task.wrong_reply)):
        headers = {"x-sim-oracle-accuracy": accuracy}
        done = _ask(client, messages, extra_headers=headers)
        assert done.choices[0].message.content == expected
        chunks = _ask(client, messages, stream=True, extra_headers=headers)
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert streamed == expected
