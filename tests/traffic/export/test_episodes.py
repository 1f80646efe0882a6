"""Episodes rebuilt from recorded rows, and their SFT and RL exports (synthetic rows here; the
agent workload's real recorded episodes are in ``tests/loadtests/agent``)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from tests.traffic.export import synthetic as syn
from traffic.export import EpisodeExportConfig, RouteKinds, export_episodes, rebuild_episode
from traffic.export.episode_export import build_episode_dataset
from traffic.export.episodes import episode_view, group_episodes
from traffic.store import InferenceRow

TOOLS = [syn.WEATHER_TOOL_CHAT]
PARIS = '{"city": "Paris"}'


def _call(i: int, arguments: str, name: str = "get_weather") -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": arguments}}  # fmt: skip


def agent_rows(
    minute: float,
    episode: str,
    calls: list[str],
    final: str = "Sunny in Paris.",
    *,
    targets: list[str] | None = None,
    verdict: str | None = "accepted",
    name: str = "get_weather",
) -> list[InferenceRow]:
    """An agent episode on Chat Completions: one step per call (its arguments' text), then the
    final answer; every request carries the whole history so far, as agents send it."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "What is the weather in Paris? Mail me at dev@acme-corp.io"},
    ]
    rows = []
    targets = targets or ["local"] * (len(calls) + 1)
    for i in range(len(calls) + 1):
        request = {"model": "auto", "messages": list(messages), "tools": TOOLS}
        last = i == len(calls)
        answer = (
            syn.chat_response(final)
            if last
            else syn.chat_response(None, [_call(i, calls[i], name)])
        )
        fb = []
        if last and verdict is not None:
            fb = [dataclasses.replace(syn.feedback(verdict, minute + i), payload={"reason": "ok"})]
        rows.append(
            syn.row(minute + i, "openai.chat", request, answer, episode=episode,
                    route_target=targets[i], fb=fb)
        )  # fmt: skip
        if not last:
            messages.append(answer["choices"][0]["message"])
            messages.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"sunny {i}"})
    return rows


def test_the_last_turn_holds_the_whole_trajectory() -> None:
    rows = agent_rows(0, "ep-1", [PARIS, '{"city": "Paris", "days": 2}'])
    episode = rebuild_episode(list(reversed(rows)))
    assert episode.episode_id == "ep-1" and episode.consistent and episode.complete
    assert [m["role"] for m in episode.messages] == [
        "system", "user", "assistant", "tool", "assistant", "tool", "assistant"
    ]  # fmt: skip
    assert [len(s.calls) for s in episode.steps] == [1, 1, 0]
    assert [r["content"] for s in episode.steps for r in s.tool_results] == ["sunny 0", "sunny 1"]
    assert episode.verdict == "accepted" and episode.verdict_reason == "ok"
    assert episode.reward == 1.0 and episode.invalid_calls == 0
    view = episode_view(episode)
    assert view["summary"]["steps"] == 3 and view["summary"]["local_steps"] == 3
    assert view["steps"][0]["tool_calls"][0] == {
        "id": "call_0", "name": "get_weather", "valid": True, "problem": None
    }  # fmt: skip
    json.dumps(view)  # the admin API's answer is plain JSON


def test_a_rewritten_history_is_reported_not_trusted() -> None:
    rows = agent_rows(0, "ep-2", [PARIS, '{"city": "Lyon"}'])
    # The client compacted its history before the last turn: the first call is gone from it.
    last = rows[-1].inference
    assert isinstance(last.request, dict)  # synthetic rows hold parsed bodies
    compacted = [m for m in last.request["messages"] if m.get("tool_call_id") != "call_0"]
    compacted = [m for m in compacted if not any(
        c["id"] == "call_0" for c in m.get("tool_calls") or ())]  # fmt: skip
    rows[-1] = InferenceRow(
        dataclasses.replace(last, request={**last.request, "messages": compacted}),
        rows[-1].feedback,
    )
    episode = rebuild_episode(rows)
    assert not episode.consistent
    assert episode.problems == tuple(
        f"step {i}: its turn is not part of the final conversation" for i in (0, 1)
    )


def test_broken_tool_calls_are_found() -> None:
    unknown = rebuild_episode(agent_rows(0, "ep-3", [PARIS], name="launch_rocket"))
    malformed = rebuild_episode(agent_rows(0, "ep-4", ['{"city": "Par']))
    off_schema = rebuild_episode(agent_rows(0, "ep-5", ['{"days": 2}']))
    assert unknown.steps[0].calls[0].problem == "unknown_tool"
    assert malformed.steps[0].calls[0].problem == "malformed_arguments"
    problem = off_schema.steps[0].calls[0].problem
    assert problem is not None and problem.startswith("schema:") and "city" in problem
    assert all(e.invalid_calls == 1 for e in (unknown, malformed, off_schema))


def test_steps_are_local_or_frontier_by_target() -> None:
    rows = agent_rows(0, "ep-6", [PARIS], targets=["local", "frontier-openai"])
    by_prefix = rebuild_episode(rows)
    assert [s.route_kind for s in by_prefix.steps] == ["local", "frontier"]
    named = rebuild_episode(rows, routes=RouteKinds(local=frozenset({"frontier-openai"})))
    assert [s.route_kind for s in named.steps] == ["frontier", "local"]


def test_the_latest_verdict_counts_and_grouping_keeps_episodes_apart() -> None:
    rows = agent_rows(0, "ep-7", [PARIS]) + agent_rows(10, "ep-8", [PARIS], verdict=None)
    late = dataclasses.replace(syn.feedback("rejected", 30), inference_id=rows[0].inference.id)
    rows[0] = InferenceRow(rows[0].inference, [late])
    lone = syn.chat_row(20, "hello", "hi")  # no episode: not an agent's
    episodes = group_episodes([*rows, lone])
    assert [e.episode_id for e in episodes] == ["ep-7", "ep-8"]
    assert episodes[0].verdict == "rejected"
    assert episodes[1].verdict is None and episodes[1].reward is None


def _episodes() -> list[Any]:
    return [
        rebuild_episode(agent_rows(0, "good-local", [PARIS])),
        rebuild_episode(agent_rows(10, "good-frontier", [PARIS], targets=["frontier-openai"] * 2)),
        rebuild_episode(agent_rows(20, "rejected", [PARIS], verdict="rejected")),
        rebuild_episode(agent_rows(30, "broken", ['{"days": 1}'])),
        rebuild_episode(agent_rows(40, "unjudged", [PARIS], verdict=None)),
    ]


def test_sft_keeps_accepted_clean_episodes_in_trl_shape(tmp_path: Path) -> None:
    config = EpisodeExportConfig(kind="episode_sft", out_dir=tmp_path, split={"eval_fraction": 0})  # type: ignore[arg-type]
    dataset = build_episode_dataset(_episodes(), config)
    assert dataset.counts.records_built == 2
    assert dataset.counts.skipped == {"invalid_tool_call": 1, "no_verdict": 1, "rejected": 1}
    record = dataset.train[0]
    assert set(record) == {"messages", "tools"} and record["tools"] == TOOLS
    call = record["messages"][2]["tool_calls"][0]
    assert call["function"]["arguments"] == {"city": "Paris"}
    assert record["messages"][3] == {
        "role": "tool", "tool_call_id": "call_0", "content": "sunny 0", "name": "get_weather"
    }  # fmt: skip
    assert "dev@acme-corp.io" not in json.dumps(record)  # PII scrubbed
    frontier = config.model_copy(update={"sft_route": "frontier"})
    only = build_episode_dataset(_episodes(), frontier)
    assert only.counts.records_built == 1 and only.counts.skipped["not_frontier"] == 1


def test_rl_episodes_carry_steps_and_the_terminal_reward(tmp_path: Path) -> None:
    config = EpisodeExportConfig(
        kind="episode_rl",
        out_dir=tmp_path,
        formats=("jsonl", "parquet"),
        split={"eval_fraction": 0.4},  # type: ignore[arg-type]
    )
    manifest = export_episodes(_episodes(), config)
    assert manifest.counts.records_built == 4 and manifest.counts.skipped == {"no_verdict": 1}
    assert manifest.counts.train + manifest.counts.eval == 4 and manifest.counts.eval >= 1
    assert set(manifest.files) == {"train.jsonl", "eval.jsonl", "train.parquet", "eval.parquet"}
    records = [
        json.loads(line)
        for split in ("train", "eval")
        for line in (tmp_path / f"{split}.jsonl").read_text().splitlines()
    ]
    by_id = {r["episode_id"]: r for r in records}
    assert by_id["rejected"]["reward"] == 0.0 and by_id["good-local"]["reward"] == 1.0
    broken = by_id["broken"]
    assert broken["summary"]["invalid_tool_calls"] == 1
    assert broken["steps"][0]["tool_calls"][0]["valid"] is False
    step = by_id["good-frontier"]["steps"][0]
    assert step["route_kind"] == "frontier" and step["cost_usd"] == 0.001
    assert step["tool_results"] == [
        {"role": "tool", "tool_call_id": "call_0", "content": "sunny 0"}
    ]
    assert by_id["good-local"]["prompt"] == by_id["good-local"]["messages"][:2]
    # The split keeps the latest episodes for eval, never cutting one in two.
    evals = [
        json.loads(x)["episode_id"] for x in (tmp_path / "eval.jsonl").read_text().splitlines()
    ]
    assert evals == ["broken"] or evals[-1] == "broken"
