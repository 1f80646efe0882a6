"""The steps of an agent episode take their credit from its one verdict, and the routing refit
learns from them where tool-bearing steps may go: an episode whose local steps broke or made
the gateway fall back teaches "frontier" for such steps, while chat stays local."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rl_loop.config import RefitConfig
from rl_loop.episode_credit import FALLBACK_KIND, step_verdicts
from rl_loop.outcomes import VerdictCache
from rl_loop.refit import refit_policy
from router.chat_text import request_text
from router.features import RequestFeatures
from router.learned import LearnedState
from tests.rl_loop.test_refit import policy_for
from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_episodes import PARIS, TOOLS, agent_rows
from traffic.store import InferenceRow, SqliteBackend

LOCAL, FRONTIER = "local", "frontier-openai"


def _credits(rows: list[InferenceRow]) -> dict[str, bool]:
    return step_verdicts(rows, local_target=LOCAL, frontier_prefix="frontier")


def _fell_back(row: InferenceRow) -> InferenceRow:
    reason = "episode_fallback:invalid_call failed_step=1 turn=2/3"
    inference = dataclasses.replace(
        row.inference, policy_reason=reason, decision_kind=FALLBACK_KIND
    )
    return dataclasses.replace(row, inference=inference)


def test_the_steps_of_an_accepted_episode_share_its_verdict() -> None:
    rows = agent_rows(0, "ep-ok", [PARIS, PARIS])
    credits = _credits(rows)
    assert credits == {rows[0].inference.id: True, rows[1].inference.id: True}  # last: its own


def test_the_steps_of_a_rejected_episode_are_rejected() -> None:
    rows = agent_rows(0, "ep-bad", [PARIS], verdict="rejected")
    assert _credits(rows) == {rows[0].inference.id: False}


def test_a_broken_call_is_rejected_even_when_the_episode_succeeds() -> None:
    rows = agent_rows(0, "ep-broken", ["{not json", PARIS])
    credits = _credits(rows)
    assert credits[rows[0].inference.id] is False
    assert credits[rows[1].inference.id] is True


def test_the_local_step_the_gateway_fell_back_from_is_rejected() -> None:
    rows = agent_rows(0, "ep-fb", [PARIS, PARIS], targets=[LOCAL, FRONTIER, FRONTIER])
    rows[1] = _fell_back(rows[1])
    credits = _credits(rows)
    assert credits[rows[0].inference.id] is False  # local, and the next step fell back
    assert credits[rows[1].inference.id] is True  # the frontier's step, the episode succeeded


def test_an_unjudged_episode_or_a_chat_judged_turn_by_turn_gets_no_credit() -> None:
    unjudged = agent_rows(0, "ep-open", [PARIS], verdict=None)
    chat = [
        syn.chat_row(10 + i, f"question {i}", "answer", fb=[syn.feedback("accepted", 10 + i)])
        for i in range(3)
    ]
    chat = [
        dataclasses.replace(r, inference=dataclasses.replace(r.inference, episode_id="chat-1"))
        for r in chat
    ]
    assert _credits(unjudged + chat) == {}


def _tool_features() -> RequestFeatures:
    body = {
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": TOOLS,
    }
    text = request_text("chat.completions", body)
    return RequestFeatures(
        "chat.completions", "auto", 40, has_tools=True, request_id="t", text=text
    )


def _chat_features() -> RequestFeatures:
    body = {"messages": [{"role": "user", "content": "question 3"}]}
    text = request_text("chat.completions", body)
    return RequestFeatures("chat.completions", "auto", 10, request_id="c", text=text)


async def test_the_refit_sends_agent_steps_to_the_frontier_when_local_steps_fail(
    tmp_path: Path,
) -> None:
    rows: list[InferenceRow] = []
    for e in range(8):  # local steps break and the gateway falls back; the frontier finishes
        episode = agent_rows(
            e * 10, f"ep-local-{e}", ["{broken", PARIS], targets=[LOCAL, FRONTIER, FRONTIER]
        )
        episode[1] = _fell_back(episode[1])
        rows += episode
    for e in range(8):  # the frontier's own episodes succeed
        rows += agent_rows(100 + e * 10, f"ep-frontier-{e}", [PARIS], targets=[FRONTIER] * 2)
    # chat: the local model answers well, judged answer by answer; enough verdicts that the
    # threshold's lower bound clears the target against a frontier accepting all (0.999)
    for i in range(300):
        rows.append(
            syn.chat_row(
                1000 + i, f"question {i}", "answer", route_target=LOCAL,
                fb=[syn.feedback("accepted", 1000 + i)],
            )
        )  # fmt: skip
        rows.append(
            syn.chat_row(
                2000 + i, f"question {i}", "answer", fb=[syn.feedback("accepted", 2000 + i)]
            )
        )
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await store.insert_inferences([r.inference for r in rows])
        await store.insert_feedback([f for r in rows for f in r.feedback])
        report = await refit_policy(
            store,
            state_file=tmp_path / "state.json",
            weights_version=None,
            verify=None,
            config=RefitConfig(window_days=None),  # the synthetic record dates from 2025
            local_target=LOCAL,
            frontier_prefix="frontier",
            cache=VerdictCache(None),
            version="fit-agents",
        )
    finally:
        await store.close()
    # 8 broken local steps rejected (without credit the refit saw no local agent outcome);
    # the frontier's 8 + 8 middle steps and 16 last steps accepted.
    assert report.outcomes["*|tools"] == {"local": [0, 8], "frontier": [32, 0]}
    state = LearnedState.from_json(json.loads((tmp_path / "state.json").read_text()))
    policy = policy_for(state)
    assert policy.decide(_tool_features()).target == "frontier"
    assert policy.decide(_chat_features()).target == "local"
