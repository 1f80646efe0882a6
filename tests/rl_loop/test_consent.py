"""Consent in the RL loop: on a record mixing ``allow``, ``redact`` and ``deny`` keys, no
``deny`` content and no unscrubbed ``redact`` content reaches a round's datasets (SFT, RL
prompts, preference pairs), its agent examples, the preference pairs of sampled answers, or the
routing refit's outcomes (live verdicts, shadow answers, the live mix); the round counts what
was withheld."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rl_loop.agent_data import agent_sft_examples
from rl_loop.config import AgentDistillConfig, DataConfig, RefitConfig
from rl_loop.datasets import build_round_data
from rl_loop.feedback_pairs import RecordedAnswer, export_pairs
from rl_loop.outcomes import VerdictCache
from rl_loop.refit import gather_outcomes
from tests.traffic.export.test_consent import DENIED, EMAIL, SECRET, mixed_rows
from tests.traffic.export.test_episodes import agent_rows
from traffic.store import InferenceRow, ShadowRecord, StoreBackend
from traffic.store.ids import id_at


def _stamped(row: InferenceRow, use: str) -> InferenceRow:
    return dataclasses.replace(row, inference=dataclasses.replace(row.inference, training_use=use))


def _recent(rows: list[InferenceRow]) -> list[InferenceRow]:
    """``rows`` moved to the last hours (the refit reads a window before now), order kept."""
    start = datetime.now(UTC) - timedelta(hours=1)
    out = []
    for i, row in enumerate(rows):
        ts = start + timedelta(seconds=i)
        tags = {**row.inference.tags, "family": "f"}
        inf = dataclasses.replace(row.inference, id=id_at(ts, i), ts=ts, tags=tags)
        feedback = [dataclasses.replace(f, inference_id=inf.id, ts=ts) for f in row.feedback]
        out.append(InferenceRow(inf, feedback))
    return out


async def _record(store: StoreBackend, rows: list[InferenceRow]) -> None:
    await store.insert_inferences([r.inference for r in rows])
    await store.insert_feedback([f for r in rows for f in r.feedback])


def _leaks(value: Any) -> list[str]:
    text = json.dumps(value, default=repr)
    return [s for s in (DENIED, SECRET, EMAIL) if s in text]


async def test_a_rounds_datasets_hold_no_denied_or_unscrubbed_content(
    store: StoreBackend,
) -> None:
    await _record(store, mixed_rows())
    data = await build_round_data(
        store, DataConfig(eval_fraction=0.25, scrub_pii=False), pairs=True
    )
    sft = [dataclasses.asdict(e) for e in (*data.sft_train, *data.sft_eval)]
    prompts = [dataclasses.asdict(p) for p in (*data.prompts_train, *data.prompts_eval)]
    assert sft and prompts
    assert _leaks([*sft, *prompts]) == []
    assert _leaks([*data.pairs_train, *data.pairs_eval]) == []
    assert "<SECRET_GITHUB_TOKEN_1>" in json.dumps([*sft, *prompts])
    assert all(c.withheld == {"deny": 4} for c in data.exports.values())
    assert data.withheld_rows() == 4


async def test_the_routing_refit_reads_no_denied_row_and_redact_text_scrubbed(
    store: StoreBackend,
) -> None:
    rows = _recent(mixed_rows())
    await _record(store, rows)
    denied = [r.inference for r in rows if r.inference.training_use == "deny"]
    shadows = [
        ShadowRecord(inference_id=r.id, target="local", response={}, comparison={"verdict": True})
        for r in denied
    ]
    await store.insert_shadows(shadows)
    gathered = await gather_outcomes(
        store,
        verify=None,
        cache=VerdictCache(None),
        config=RefitConfig(window_days=1, live_mix_requests=100),
        local_target="local",
        frontier_prefix="frontier",
    )
    assert {o.inference_id for o in gathered.outcomes}.isdisjoint({r.id for r in denied})
    assert all(o.source == "feedback" for o in gathered.outcomes)  # the shadows were denied
    assert len(gathered.outcomes) == 8  # the allow and redact rows' verdicts
    assert _leaks([dataclasses.asdict(o) for o in gathered.outcomes]) == []
    assert _leaks([dataclasses.asdict(t) for t in gathered.live]) == []
    assert len(gathered.live) == 8 and gathered.withheld == {"deny": 4}


async def test_an_agent_episode_with_a_denied_step_teaches_nothing(
    store: StoreBackend, tmp_path: Path
) -> None:
    frontier = ["frontier-openai"] * 2
    allowed = agent_rows(0, "ep-ok", ['{"city": "Paris"}'], targets=frontier)
    denied = agent_rows(10, "ep-no", [f'{{"city": "{DENIED}"}}'], targets=frontier)
    rows = [*allowed, _stamped(denied[0], "deny"), denied[1]]
    await _record(store, rows)
    examples, counts, _ = await agent_sft_examples(
        store,
        AgentDistillConfig(max_examples=100),
        DataConfig(eval_fraction=0.0),
        local_target="local",
        work_dir=tmp_path,
        until=rows[-1].inference.ts + timedelta(days=1),
    )
    assert examples and _leaks([dataclasses.asdict(e) for e in examples]) == []
    assert counts["agent_episodes_withheld"] == 1 and counts["agent_episodes_train"] == 1


def test_sampled_answers_keep_their_prompts_consent() -> None:
    prompt = [{"role": "user", "content": f"deploy with {SECRET}"}]
    answers = [
        RecordedAnswer(prompt, "good", True, training_use="redact"),
        RecordedAnswer(prompt, "bad", False, training_use="redact"),
        RecordedAnswer([{"role": "user", "content": DENIED}], "x", True, training_use="deny"),
        RecordedAnswer([{"role": "user", "content": DENIED}], "y", False, training_use="deny"),
    ]
    pairs = export_pairs(answers)
    assert len(pairs) == 1 and _leaks(pairs) == []
    assert "<SECRET_GITHUB_TOKEN_1>" in json.dumps(pairs)
