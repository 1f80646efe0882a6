"""The flywheel's agent figures from recorded episodes (rows in a real SQLite record, written as
the gateway writes them), the report's agent table and curves, and the chat loop's view of the
record without the agent episodes."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rl_loop.agent_report import agent_figures, agent_targets, agent_window_figures
from rl_loop.agent_round import without_episodes
from rl_loop.report import RoundFigures, write_report
from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_episodes import PARIS, agent_rows
from traffic.export.episodes import RouteKinds, rebuild_episode
from traffic.store import InferenceFilter, InferenceRow, StoreBackend

LONG_AGO = datetime(2000, 1, 1, tzinfo=UTC)
LOCAL = RouteKinds(local=frozenset({"local"}))
FRONTIER = "frontier"


def _round_rows() -> dict[str, list[InferenceRow]]:
    return {
        "fr-ok": agent_rows(0, "fr-ok", [PARIS], targets=[FRONTIER] * 2),
        "fr-bad": agent_rows(10, "fr-bad", [PARIS], targets=[FRONTIER] * 2, verdict="rejected"),
        "mixed-ok": agent_rows(20, "mixed-ok", [PARIS], targets=["local", FRONTIER]),
        "local-broken": agent_rows(
            30, "local-broken", ['{"city": "Par'], targets=["local"] * 2, verdict="rejected"
        ),
        "fr-unjudged": agent_rows(40, "fr-unjudged", [PARIS], targets=[FRONTIER] * 2, verdict=None),
    }


KINDS = {
    "fr-ok": "fix_bug",
    "fr-bad": "fix_bug",
    "mixed-ok": "add_import",
    "local-broken": "add_import",
    "fr-unjudged": "implement",
}


def test_episode_success_is_split_by_who_served_its_steps() -> None:
    episodes = [rebuild_episode(rows, routes=LOCAL) for rows in _round_rows().values()]
    figures = agent_figures(0, episodes, KINDS)
    assert figures.episodes == 5 and figures.steps == 10 and figures.local_steps == 3
    assert figures.local_share == pytest.approx(0.3)
    assert figures.success["frontier"] == {"episodes": 3, "judged": 2, "success": 0.5}
    assert figures.success["with_local"] == {"episodes": 2, "judged": 2, "success": 0.5}
    assert figures.success["local"]["success"] == 0.0
    assert figures.success["mixed"]["success"] == 1.0
    assert figures.success["overall"] == {"episodes": 5, "judged": 4, "success": 0.5}
    # Local steps: mixed-ok's first (one valid call), local-broken's two (one malformed call,
    # then the text answer).
    assert (figures.local_tool_calls, figures.local_valid_calls) == (2, 1)
    assert figures.local_validity == 0.5 and figures.local_steps_without_call == 1
    assert figures.cost_per_episode_usd == pytest.approx(0.002)
    assert figures.by_kind["add_import"]["overall"]["success"] == 0.5
    assert figures.by_kind["implement"]["overall"]["judged"] == 0


def test_a_round_without_local_steps_has_no_local_validity() -> None:
    rows = _round_rows()
    episodes = [rebuild_episode(rows[k], routes=LOCAL) for k in ("fr-ok", "fr-bad")]
    figures = agent_figures(0, episodes, KINDS)
    assert figures.local_share == 0.0 and figures.local_validity is None
    assert figures.success["with_local"]["success"] is None
    targets = agent_targets([figures, figures])
    assert targets["agent_success_vs_frontier_only"] == {
        "frontier_only": 0.5, "last": 0.5, "met": True
    }  # fmt: skip
    assert targets["agent_local_share"]["met"] is False
    assert targets["agent_local_tool_call_validity"]["met"] is False
    assert targets["agent_success_every_round"]["reference"] == "round0"


def test_each_round_is_judged_against_frontier_only_on_its_own_episodes() -> None:
    rows = _round_rows()
    both = agent_figures(0, [rebuild_episode(rows[k], routes=LOCAL) for k in KINDS], KINDS)
    good = agent_figures(1, [rebuild_episode(rows["fr-ok"], routes=LOCAL)], KINDS)
    both.paired_frontier = {"episodes": 5, "success": 0.5}
    good.paired_frontier = {"episodes": 1, "success": 1.0}
    every = agent_targets([both, good])["agent_success_every_round"]
    assert every["reference"] == "paired" and every["ratio_per_round"] == [1.0, 1.0]
    # Against round 0's frontier episodes (1 of 2 passed) the second round reads 2.0.
    assert every["ratio_vs_round0_per_round"] == [1.0, 2.0]
    good.paired_frontier = {}
    assert agent_targets([both, good])["agent_success_every_round"]["reference"] == "round0"


async def _write(store: StoreBackend, rows: list[InferenceRow]) -> None:
    await store.insert_inferences([r.inference for r in rows])
    await store.insert_feedback([f for r in rows for f in r.feedback])


async def test_figures_are_rebuilt_from_the_record_for_the_named_episodes(
    store: StoreBackend,
) -> None:
    rows = _round_rows()
    await _write(store, [r for group in rows.values() for r in group])
    await _write(store, [syn.chat_row(50, "hello", "hi")])  # chat traffic: not an episode
    ours = {k: KINDS[k] for k in ("fr-ok", "mixed-ok")}
    figures = await agent_window_figures(store, 2, LONG_AGO, ours)
    assert figures.round == 2 and figures.episodes == 2 and figures.local_steps == 1
    assert figures.success["overall"]["success"] == 1.0


async def test_the_chat_loop_reads_the_record_without_the_agent_episodes(
    store: StoreBackend,
) -> None:
    rows = _round_rows()
    await _write(store, [*rows["fr-ok"], *rows["mixed-ok"], syn.chat_row(50, "hello", "hi")])
    hidden: set[str] = set()
    view = without_episodes(store, hidden)
    everything = [r async for r in view.iter_inferences(InferenceFilter())]
    assert len(everything) == 5
    hidden.update({"fr-ok", "mixed-ok"})  # the round's episodes, named after they ran
    chat = [r async for r in view.iter_inferences(InferenceFilter())]
    assert [r.inference.episode_id for r in chat] == [None]


def test_the_report_adds_the_agent_table_curves_and_summary(tmp_path: Path) -> None:
    episodes = [rebuild_episode(rows, routes=LOCAL) for rows in _round_rows().values()]
    agent = [agent_figures(r, episodes, KINDS) for r in range(2)]
    agent[0].gate = {"decision": "promote"}
    view = {
        "requests": 10, "local_share": 0.5, "accept_local": 1.0, "accept_frontier": 1.0,
        "accept_overall": 1.0, "cost_per_1k_usd": 1.0, "latency_p50_ms": 10.0, "failed": 0,
    }  # fmt: skip
    chat = [RoundFigures(r, "v", "p", view, view, view, {"a": view}, 0) for r in range(2)]
    targets = {
        "cost_per_1k_drop": {"drop": 0.0},
        "overall_accept_vs_frontier_only": {"frontier_only": 1.0},
        "learnable_classes_met": "0/0",
        "zero_failed_client_requests": {"failed": 0},
        "agent": agent_targets(agent),
    }
    summary = write_report({"preset": "t"}, chat, [], targets, [tmp_path], 1.0, agent)
    assert summary["agent"]["success_frontier_only"] == [0.5, 0.5]
    assert summary["agent"]["local_share"] == [pytest.approx(0.3)] * 2
    assert summary["agent"]["gate"] == ["promote"]
    text = (tmp_path / "report.txt").read_text()
    assert "agent episodes:" in text and "promote" in text
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["agent_rounds"][1]["local_tool_calls"] == 2
    assert (tmp_path / "agent_curves.png").stat().st_size > 10_000
