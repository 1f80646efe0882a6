"""Agent episodes through a real gateway, recorded, rebuilt and exported.

A gateway on loopback records into SQLite; its targets are the frontier simulator (``local`` on
the vLLM pass-through path, ``frontier-openai`` and ``frontier-anthropic`` through the provider
routes and litellm). The agent client runs episodes of every kind over Chat Completions and the
Responses API, streamed and not, on each target. Then the record must rebuild each episode
exactly as the client lived it (its steps, their targets, each step's tool calls, the verdict)
and the episode exports must load with ``datasets`` in TRL's shapes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadtests.agent.client import AgentClientConfig, AgentRunStats, run_agent_client
from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from tasks.agent.tasks import AGENT_KINDS, make_agent_task
from tests.gateway.conftest import store_gateway
from traffic.export import EpisodeExportConfig, RouteKinds, export_episodes, rebuild_episode
from traffic.export.episodes import Episode
from traffic.store import InferenceFilter, StoreConfig, open_store

pytestmark = pytest.mark.slow  # a gateway start and ~16 episodes: ~30 s here

MODELS = ("auto", "gpt-4o-mini", "claude-haiku-4-5")  # local, frontier-openai, -anthropic


@dataclass
class Recorded:
    stats: AgentRunStats
    episodes: dict[str, Episode]


async def _read_episodes(url: str, ids: list[str]) -> dict[str, Episode]:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        out = {}
        for episode_id in ids:
            rows = [r async for r in store.iter_inferences(InferenceFilter(episode_id=episode_id))]
            out[episode_id] = rebuild_episode(rows, routes=RouteKinds(local=frozenset({"local"})))
        return out
    finally:
        await store.close()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recorded]:
    tmp = tmp_path_factory.mktemp("agent-episodes")
    sim = run_in_thread(SimulatorConfig(agent_success_rate=0.7, seed=3))
    url = f"sqlite:///{tmp / 'traffic.db'}"
    gw = store_gateway(sim.base_url, url, tmp / "spool").start()
    stats = AgentRunStats()
    try:
        for i, model in enumerate(MODELS):
            kinds = AGENT_KINDS if model == "auto" else AGENT_KINDS[i::2]
            tasks = [make_agent_task(kind, 100 + i) for kind in kinds]
            config = AgentClientConfig(gateway=gw.base_url, oracle_url=sim.base_url, model=model)
            stats.episodes += asyncio.run(run_agent_client(config, tasks)).episodes
    finally:
        gw.stop()  # flushes the record writer
        sim.stop()
    episodes = asyncio.run(_read_episodes(url, [e.episode_id for e in stats.episodes]))
    yield Recorded(stats, episodes)


def test_no_client_request_fails_and_both_outcomes_occur(recorded: Recorded) -> None:
    summary = recorded.stats.summary()
    assert summary["failed_requests"] == 0
    assert summary["feedback_posted"] == summary["episodes"]
    assert 0 < summary["success_rate"] < 1
    assert set(summary["steps_by_target"]) == {"local", "frontier-openai", "frontier-anthropic"}
    assert {(e.flavour, e.stream) for e in recorded.stats.episodes} == {
        ("chat", True), ("chat", False), ("responses", True), ("responses", False)
    }  # fmt: skip


def test_the_record_rebuilds_every_episode_exactly(recorded: Recorded) -> None:
    for lived in recorded.stats.episodes:
        episode = recorded.episodes[lived.episode_id]
        where = f"{lived.task_id} over {lived.flavour} (stream={lived.stream})"
        assert episode.consistent and episode.complete, (where, episode.problems)
        assert [s.record.id for s in episode.steps] == [s.request_id for s in lived.steps], where
        assert [s.record.route_target for s in episode.steps] == [s.target for s in lived.steps]
        assert [[c.name for c in s.calls] for s in episode.steps] == [
            [c.name for c in s.calls] for s in lived.steps
        ], where
        assert all(len(s.tool_results) == len(s.calls) for s in episode.steps), where
        assert episode.verdict == ("accepted" if lived.passed else "rejected"), where
        assert episode.verdict_reason == lived.verdict.feedback[:300]  # type: ignore[union-attr]
        last = episode.messages[-1]
        assert last["role"] == "assistant" and last["content"] == lived.final_text, where
        tool_messages = sum(m["role"] == "tool" for m in episode.messages)
        assert tool_messages == sum(len(s.calls) for s in lived.steps)
        assert episode.invalid_calls == 0
        local = {s.route_kind for s in episode.steps}
        assert local == ({"local"} if lived.steps[0].target == "local" else {"frontier"})


def _load(path: Path, cache: Path) -> list[dict[str, Any]]:
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    builder = "json" if path.suffix == ".jsonl" else "parquet"
    ds = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(cache))
    return list(ds)


def _rounded(value: Any) -> Any:
    """``value`` with floats to 12 significant digits (``datasets`` parses JSON floats to within
    a unit in the last place)."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def test_exports_load_in_trl_shapes(
    recorded: Recorded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    from trl.data_utils import is_conversational

    episodes = list(recorded.episodes.values())
    accepted = sum(e.verdict == "accepted" for e in episodes)
    for kind in ("episode_sft", "episode_rl"):
        out = tmp_path / kind
        config = EpisodeExportConfig(
            kind=kind,  # type: ignore[arg-type]
            out_dir=out,
            formats=("jsonl", "parquet"),
            split={"eval_fraction": 0.0},  # type: ignore[arg-type]
        )
        manifest = export_episodes(episodes, config)
        raw = [json.loads(line) for line in (out / "train.jsonl").read_text().splitlines()]
        assert manifest.counts.train == len(raw)
        from_parquet = _load(out / "train.parquet", tmp_path / "cache")
        assert _rounded(from_parquet) == _rounded(raw)
        if kind == "episode_sft":
            assert len(raw) == accepted and manifest.counts.skipped == {
                "rejected": len(episodes) - accepted
            }
            for record in raw:
                assert set(record) == {"messages", "tools"} and is_conversational(record)
                roles = [m["role"] for m in record["messages"]]
                assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
                for m in record["messages"]:
                    for call in m.get("tool_calls") or ():
                        assert isinstance(call["function"]["arguments"], dict)
                    if m["role"] == "tool":
                        assert m["name"] in {t["function"]["name"] for t in record["tools"]}
        else:
            assert len(raw) == len(episodes)
            assert sorted(r["reward"] for r in raw) == sorted(
                float(e.verdict == "accepted") for e in episodes
            )
            for record in raw:
                assert len(record["steps"]) == record["summary"]["steps"]
                assert record["prompt"] == record["messages"][: len(record["prompt"])]
                assert all(s["route_kind"] in ("local", "frontier") for s in record["steps"])
