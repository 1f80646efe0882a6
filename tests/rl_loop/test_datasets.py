"""A round's datasets come from the traffic record in process: the exporter's records as typed
examples, the same ones a file export holds, and no file written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rl_loop.config import DataConfig
from rl_loop.datasets import PromptRecord, SftExample, build_round_data
from tests.traffic.store.scenario import day, inference
from traffic.export import ExportConfig, SplitConfig, export_from_store
from traffic.store import FeedbackRecord, InferenceFilter, StoreBackend


def _chat(question: str, answer: str) -> dict[str, object]:
    return {
        "request": {"model": "auto", "messages": [{"role": "user", "content": question}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": answer}}]},
        "route_target": "frontier-openai",
        "tags": {"family": "arith"},
    }


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _files(root: Path) -> set[Path]:
    return set(root.rglob("*"))


async def _record(store: StoreBackend) -> list[str]:
    rows = [inference(day(d), **_chat(f"What is {d}+{d}?", str(2 * d))) for d in range(1, 9)]
    await store.insert_inferences(rows)
    await store.insert_feedback(
        [
            FeedbackRecord(inference_id=r.id, kind="accepted", ts=day(i + 1, 13))
            for i, r in enumerate(rows[:6])
        ]
        + [FeedbackRecord(inference_id=rows[6].id, kind="rejected", ts=day(7, 13))]
    )
    return [r.id for r in rows]


async def test_round_data_is_built_in_process(store: StoreBackend, tmp_path: Path) -> None:
    ids = await _record(store)
    config = DataConfig(eval_fraction=0.25)
    before = _files(tmp_path)
    data = await build_round_data(store, config)
    assert _files(tmp_path) == before  # no dataset files
    # time split: the latest quarter of the rows each dataset's records come from
    assert data.counts() == {
        "sft_train": 4,
        "sft_eval": 2,
        "prompts_train": 6,
        "prompts_eval": 2,
        "pairs_train": 0,  # pairs are built only for a round that trains DPO
        "pairs_eval": 0,
    }
    assert data.sft_train[0] == SftExample([{"role": "user", "content": "What is 1+1?"}], "2")
    assert data.prompts_eval[-1] == PromptRecord(
        id=ids[-1],
        prompt=[{"role": "user", "content": "What is 8+8?"}],
        tags={"family": "arith"},
        feedback={"accepted": 0, "rejected": 0, "edited": 0, "demonstrations": 0, "scores": []},
    )
    assert data.exports["sft"].skipped == {"rejected": 1, "unlabelled": 1}

    # the same records a file export of the same rows writes
    out = tmp_path / "export"
    query = InferenceFilter(ok_only=True)
    split = SplitConfig(eval_fraction=config.eval_fraction)
    await export_from_store(store, query, ExportConfig(kind="rl_prompts", out_dir=out, split=split))
    lines = _jsonl(out / "train.jsonl")
    assert [r["id"] for r in lines] == [p.id for p in data.prompts_train]
    assert [r["prompt"] for r in lines] == [p.prompt for p in data.prompts_train]


async def test_round_data_reads_what_was_recorded_before_until(store: StoreBackend) -> None:
    await _record(store)
    data = await build_round_data(store, DataConfig(eval_fraction=0.0), until=day(4))
    assert data.exports["rl_prompts"].rows_read == 3
    assert [p.prompt[0]["content"] for p in data.prompts_train] == [
        "What is 1+1?",
        "What is 2+2?",
        "What is 3+3?",
    ]
