"""The export pipeline end to end: counts, files, manifest, reproducibility; the same records
built in memory."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from tests.traffic.export import synthetic as syn
from traffic.export import DatasetConfig, ExportConfig, build_dataset, export_dataset
from traffic.export.config import DedupConfig, SplitConfig
from traffic.store import InferenceRow

LONG_ANSWER = " ".join(f"step {i} run the build and check the output carefully" for i in range(30))


def traffic() -> list[InferenceRow]:
    """38 rows: every wire format, feedback of every kind, PII, duplicates, odd shapes."""
    rows: list[InferenceRow] = []
    for i in range(20):
        rows.append(
            syn.chat_row(
                i,
                f"Question {i}: how do I configure service {i * 7}?",
                f"Answer {i}: set option {i} in the config file.",
                system="You help developers.",
                episode=f"ep{i // 4}",
                fb=[syn.feedback("accepted", i)] if i % 5 else [syn.feedback("rejected", i)],
            )
        )
    rows.append(syn.chat_tool_row(20.5, fb=[syn.feedback("accepted", 20)]))
    rows.append(
        syn.completions_row(
            21, "def add(a, b):", " return a + b", fb=[syn.feedback("accepted", 21)]
        )
    )
    rows.append(syn.responses_row(22, fb=[syn.feedback("accepted", 22)]))
    rows.append(syn.anthropic_row(23, fb=[syn.feedback("edited", 23, text="Use assert 1 == 1.")]))
    rows.append(
        syn.chat_row(
            24,
            "Mail bob@corp.io, key sk-abcdefghijklmnopqrstu12345",
            "Done, wrote to 203.0.113.7",
            fb=[syn.feedback("accepted", 24)],
        )
    )
    # exact duplicate (whitespace differs) and near duplicate of a long answer
    rows.append(
        syn.chat_row(
            25,
            "Question 3: how do I configure service 21?",
            "Answer 3:  set option 3 in the config file.",
            system="You help developers.",
            fb=[syn.feedback("accepted", 25)],
        )
    )
    rows.append(
        syn.chat_row(
            26, "Explain the release process", LONG_ANSWER, fb=[syn.feedback("accepted", 26)]
        )
    )
    rows.append(
        syn.chat_row(
            27,
            "Explain the release process",
            LONG_ANSWER + " Done.",
            fb=[syn.feedback("accepted", 27)],
        )
    )
    # skipped: unlabelled, failed, unsupported shapes
    rows.append(syn.chat_row(28, "unlabelled", "x"))
    rows.append(syn.chat_row(29, "failed", None, status=500, fb=[syn.feedback("accepted", 29)]))
    rows.append(
        syn.row(
            30, "openai.completions", {"prompt": "a", "suffix": "b"}, {"choices": [{"text": "x"}]}
        )
    )
    stateful = {"model": "m", "input": "x", "previous_response_id": "r"}
    rows.append(syn.row(31, "openai.responses", stateful, None))
    # cross-row preferences: accepted vs rejected, high vs low score, one across the split
    rename = "Rename variable x to something clearer"
    rows.append(
        syn.chat_row(32, rename, "Use `count`.", episode="epA", fb=[syn.feedback("accepted", 32)])
    )
    rows.append(
        syn.chat_row(33, rename, "Use `x2`.", episode="epA", fb=[syn.feedback("rejected", 33)])
    )
    rows.append(
        syn.chat_row(
            35,
            "Write a haiku about CI",
            "Green checks bloom at dawn",
            fb=[syn.feedback("score", 35, value=0.9)],
        )
    )
    rows.append(
        syn.chat_row(
            36, "Write a haiku about CI", "CI is slow", fb=[syn.feedback("score", 36, value=0.2)]
        )
    )
    rows.append(
        syn.chat_row(
            37,
            "Question 4: how do I configure service 28?",
            "No idea.",
            system="You help developers.",
            fb=[syn.feedback("rejected", 37)],
        )
    )
    # late episode that started early stays in train
    rows.append(
        syn.chat_row(
            39,
            "Late follow-up in episode 0",
            "Sure.",
            episode="ep0",
            fb=[syn.feedback("accepted", 39)],
        )
    )
    return rows


def _config(tmp_path: Path, **kw: object) -> ExportConfig:
    base: dict[str, object] = {
        "kind": "sft",
        "out_dir": tmp_path,
        "formats": ("jsonl", "parquet"),
        "split": SplitConfig(eval_fraction=0.2),
    }
    base.update(kw)
    return ExportConfig(**base)  # type: ignore[arg-type]


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_sft_export_counts_and_files(tmp_path: Path) -> None:
    manifest = export_dataset(
        traffic(), _config(tmp_path, filters={"since": "2025-03-01"}), legacy=syn.LIVE
    )
    c = manifest.counts
    assert c.rows_read == 38
    assert c.skipped == {
        "fim_suffix": 1,
        "no_answer": 1,
        "rejected": 6,
        "stateful_conversation": 1,
        "unlabelled": 3,
    }
    assert c.records_built == 38 - 12
    assert c.exact_duplicates == 1 and c.near_duplicates == 1
    assert c.straddling_split == 0
    assert c.train + c.eval == c.records_built - 2
    assert c.eval > 0
    assert manifest.pii == {"email": 1, "ip": 1, "secret": 1}
    assert manifest.filters == {"since": "2025-03-01"}
    assert set(manifest.files) == {"train.jsonl", "eval.jsonl", "train.parquet", "eval.parquet"}
    train = _jsonl(tmp_path / "train.jsonl")
    assert len(train) == c.train == manifest.files["train.jsonl"].records
    assert pq.read_table(tmp_path / "train.parquet").num_rows == c.train

    texts = json.dumps(train + _jsonl(tmp_path / "eval.jsonl"))
    assert "bob@corp.io" not in texts and "sk-abcdefghijklmnopqrstu12345" not in texts
    assert "<EMAIL_1>" in texts and "<SECRET_OPENAI_KEY_1>" in texts
    late = [r for r in train if r["messages"][-2]["content"] == "Late follow-up in episode 0"]
    assert len(late) == 1  # its episode began in train, so it stays there

    on_disk = json.loads((tmp_path / "manifest.json").read_text())
    assert on_disk["schema_version"] == 1
    assert on_disk["kind"] == "sft"
    assert on_disk["config"]["dedup"]["threshold"] == 0.9
    assert on_disk["files"]["train.jsonl"]["sha256"] == manifest.files["train.jsonl"].sha256
    assert on_disk["counts"]["skipped"]["rejected"] == 6


@pytest.mark.parametrize("kind", ["sft", "preference_trl", "preference_openai", "rl_prompts"])
def test_same_rows_same_config_give_identical_files(tmp_path: Path, kind: str) -> None:
    rows = traffic()
    first = export_dataset(rows, _config(tmp_path / "a", kind=kind), legacy=syn.LIVE)
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    second = export_dataset(iter(shuffled), _config(tmp_path / "b", kind=kind), legacy=syn.LIVE)
    assert {k: v.sha256 for k, v in first.files.items()} == {
        k: v.sha256 for k, v in second.files.items()
    }
    for name in first.files:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert first.counts == second.counts
    assert first.counts.train > 0


def test_preference_and_rl_exports(tmp_path: Path) -> None:
    config = _config(tmp_path / "trl", kind="preference_trl", split=SplitConfig(eval_fraction=0.5))
    trl = export_dataset(traffic(), config, legacy=syn.LIVE)
    assert trl.counts.records_built == 4
    assert trl.counts.straddling_split == 1  # rows 4 (train episode) and 37 (eval)
    assert (trl.counts.train, trl.counts.eval) == (2, 1)
    train = _jsonl(tmp_path / "trl" / "train.jsonl")
    assert [r["chosen"][0]["content"] for r in train] == ["Use assert 1 == 1.", "Use `count`."]
    assert train[0]["tools"][0]["function"]["name"] == "read_file"
    assert train[1] == {
        "prompt": [{"role": "user", "content": "Rename variable x to something clearer"}],
        "chosen": [{"role": "assistant", "content": "Use `count`."}],
        "rejected": [{"role": "assistant", "content": "Use `x2`."}],
    }
    (haiku,) = _jsonl(tmp_path / "trl" / "eval.jsonl")
    assert haiku["rejected"] == [{"role": "assistant", "content": "CI is slow"}]
    assert trl.counts.skipped["no_preference_signal"] == 2  # unlabelled; failed

    rl = export_dataset(traffic(), _config(tmp_path / "rl", kind="rl_prompts"), legacy=syn.LIVE)
    assert rl.counts.skipped == {"fim_suffix": 1, "stateful_conversation": 1}
    prompts = _jsonl(tmp_path / "rl" / "train.jsonl")
    assert all(set(r) <= {"prompt", "id", "tags", "reward_context", "tools"} for r in prompts)


def test_pii_scrubbing_can_be_turned_off(tmp_path: Path) -> None:
    manifest = export_dataset(
        traffic(),
        _config(tmp_path, scrub_pii=False, split=SplitConfig(eval_fraction=0.0)),
        legacy=syn.LIVE,
    )
    assert manifest.pii == {}
    assert "bob@corp.io" in (tmp_path / "train.jsonl").read_text()
    assert manifest.counts.eval == 0
    assert (tmp_path / "eval.jsonl").read_text() == ""
    assert pq.read_table(tmp_path / "eval.parquet").num_rows == 0


def test_dedup_can_be_turned_off(tmp_path: Path) -> None:
    config = _config(tmp_path, dedup=DedupConfig(exact=False, near=False))
    counts = export_dataset(traffic(), config, legacy=syn.LIVE).counts
    assert counts.exact_duplicates == counts.near_duplicates == 0
    assert counts.train + counts.eval == counts.records_built


def test_stale_outputs_of_other_formats_are_removed(tmp_path: Path) -> None:
    export_dataset(traffic(), _config(tmp_path))
    manifest = export_dataset(traffic(), _config(tmp_path, formats=("jsonl",)))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "eval.jsonl",
        "manifest.json",
        "train.jsonl",
    ]
    assert set(manifest.files) == {"train.jsonl", "eval.jsonl"}


def test_progress_bar_and_empty_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = export_dataset([], _config(tmp_path), progress=True)
    assert manifest.counts.rows_read == 0 and manifest.counts.train == 0
    assert "export" in capsys.readouterr().err


def test_config_is_strict(tmp_path: Path) -> None:
    with pytest.raises(ValidationError):
        ExportConfig(kind="sft", out_dir=tmp_path, formats=())
    with pytest.raises(ValidationError):
        ExportConfig(kind="sft", out_dir=tmp_path, formats=("jsonl", "jsonl"))
    with pytest.raises(ValidationError):
        ExportConfig(kind="dpo", out_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        ExportConfig(kind="sft", out_dir=tmp_path, scrub=False)  # type: ignore[call-arg]


@pytest.mark.parametrize("kind", ["sft", "preference_trl", "preference_openai", "rl_prompts"])
def test_built_in_memory_the_records_are_the_files_lines(tmp_path: Path, kind: str) -> None:
    """What the RL loop trains on (no file in between) is what an export writes, in order."""
    exported = export_dataset(traffic(), _config(tmp_path, kind=kind), legacy=syn.LIVE)
    dataset = build_dataset(
        traffic(),
        DatasetConfig(kind=kind, split=SplitConfig(eval_fraction=0.2)),  # type: ignore[arg-type]
        legacy=syn.LIVE,
    )
    assert dataset.kind == kind
    assert dataset.train == _jsonl(tmp_path / "train.jsonl")
    assert dataset.eval == _jsonl(tmp_path / "eval.jsonl")
    assert dataset.counts == exported.counts and dataset.pii == exported.pii


def test_records_without_their_translation_need_the_gateways_translators(tmp_path: Path) -> None:
    """Responses and Messages rows written before migration 3 are read only with the gateway's
    translators; without them they are skipped and counted, never guessed at."""
    config = DatasetConfig(kind="rl_prompts")
    with_live = build_dataset(traffic(), config, legacy=syn.LIVE).counts
    without = build_dataset(traffic(), config).counts
    assert "untranslated_legacy_record" not in with_live.skipped
    assert without.skipped["untranslated_legacy_record"] == 3  # Responses, Messages, stateful
    assert without.rows_read == with_live.rows_read
    assert with_live.train + with_live.eval == without.train + without.eval + 2
