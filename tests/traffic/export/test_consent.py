"""Consent in every dataset builder: a ``deny`` row's content reaches no record of any kind (SFT,
preference pairs in both formats, RL prompts, agent episodes, in memory or as files); a
``redact`` row's reaches them only scrubbed, even with ``scrub_pii`` off; the manifests count
what was withheld and why."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_episodes import agent_rows
from traffic.export import (
    DatasetConfig,
    DatasetKind,
    EpisodeExportConfig,
    ExportConfig,
    SplitConfig,
    build_dataset,
    export_dataset,
    export_episodes,
)
from traffic.export.config import BuildConfig, DedupConfig
from traffic.export.episode_export import build_episode_dataset
from traffic.export.episodes import group_episodes
from traffic.store import InferenceRow

SECRET = "ghp_Zq8vX2mN4bR7tY1uK9wE3pL6sD0fH5jA2cVb"
EMAIL = "jane.doe@acme-corp.io"
DENIED = "DENIED-CONTENT"
KINDS: tuple[DatasetKind, ...] = ("sft", "preference_trl", "preference_openai", "rl_prompts")


def _stamped(row: InferenceRow, use: str | None) -> InferenceRow:
    return dataclasses.replace(row, inference=dataclasses.replace(row.inference, training_use=use))


def mixed_rows() -> list[InferenceRow]:
    """Per question: an allow row (rejected), a redact row (accepted, edited, with a secret and
    an email in every text) and a deny row (accepted, the answer a pair would choose)."""
    rows: list[InferenceRow] = []
    for k in range(4):
        question = f"Question {k}: why does my build fail?"
        allow = syn.chat_row(10 * k, question, f"allow answer {k}", fb=[syn.feedback("rejected")])
        secret_q = f"{question} My token is {SECRET}, mail {EMAIL}"
        redact = syn.chat_row(
            10 * k + 1,
            secret_q,
            f"Use {SECRET} again",
            fb=[syn.feedback("accepted"), syn.feedback("edited", text=f"Rotate {SECRET}")],
            tags={"task_id": f"ticket from {EMAIL}"},
        )
        deny = syn.chat_row(
            10 * k + 2,
            question,
            f"{DENIED} answer {k}",
            system=f"{DENIED} system prompt",
            fb=[syn.feedback("accepted"), syn.feedback("demonstration", text=DENIED)],
        )
        rows += [_stamped(allow, "allow"), _stamped(redact, "redact"), _stamped(deny, "deny")]
    return rows


def _config(kind: DatasetKind, **settings: Any) -> DatasetConfig:
    return DatasetConfig(
        kind=kind,
        split=SplitConfig(eval_fraction=0.0),
        dedup=DedupConfig(near=False),
        build=BuildConfig(label_policy="unlabelled_frontier"),
        scrub_pii=False,  # consent must not depend on it
        **settings,
    )


def _text(records: list[dict[str, Any]]) -> str:
    return json.dumps(records)


@pytest.mark.parametrize("kind", KINDS)
def test_a_deny_row_is_in_no_dataset_and_a_redact_row_only_scrubbed(kind: DatasetKind) -> None:
    dataset = build_dataset(mixed_rows(), _config(kind))
    records = [*dataset.train, *dataset.eval]
    text = _text(records)
    assert records, kind  # the allow and redact rows give something of every kind
    assert DENIED not in text
    assert SECRET not in text and EMAIL not in text
    assert dataset.counts.rows_read == 12
    assert dataset.counts.withheld == {"deny": 4}
    if kind != "preference_openai":  # its pairs hold no tags and may hold no redact answer
        assert "<SECRET_GITHUB_TOKEN_1>" in text


def test_without_consent_the_same_rows_would_leak() -> None:
    """The rows above do carry what the builders must keep out (the test can fail)."""
    unstamped = [_stamped(r, None) for r in mixed_rows()]
    text = _text(build_dataset(unstamped, _config("sft")).train)
    assert DENIED in text and SECRET in text


def test_manifests_count_withheld_rows_by_reason(tmp_path: Path) -> None:
    rows = mixed_rows()
    rows[0] = _stamped(rows[0], None)  # recorded before consent was stamped
    rows[3] = _stamped(rows[3], "only-on-tuesdays")  # a value this code does not know
    config = ExportConfig(**_config("rl_prompts").model_dump(), out_dir=tmp_path / "a")
    manifest = export_dataset(rows, config)
    assert manifest.counts.withheld == {"deny": 4, "unknown": 1}
    assert manifest.counts.redacted == 4
    on_disk = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert on_disk["counts"]["withheld"] == {"deny": 4, "unknown": 1}
    assert DENIED not in (tmp_path / "a" / "train.jsonl").read_text()
    strict = config.model_copy(update={"out_dir": tmp_path / "b", "unstamped_training_use": "deny"})
    assert export_dataset(rows, strict).counts.withheld == {"deny": 4, "unknown": 1, "unstamped": 1}
    redact = config.model_copy(
        update={"out_dir": tmp_path / "c", "unstamped_training_use": "redact"}
    )
    assert export_dataset(rows, redact).counts.redacted == 5


def _episode_rows() -> list[InferenceRow]:
    """Three accepted episodes: every step allowed; one step denied; one step redacted (the
    task carries a secret from its first step on)."""
    allowed = agent_rows(0, "ep-allow", ['{"city": "Paris"}'])
    denied = agent_rows(10, "ep-deny", [f'{{"city": "{DENIED}"}}'])
    redacted = agent_rows(20, "ep-redact", [f'{{"city": "Paris", "token": "{SECRET}"}}'])
    return [
        *(_stamped(r, "allow") for r in allowed),
        _stamped(denied[0], "allow"),
        _stamped(denied[1], "deny"),
        _stamped(redacted[0], "redact"),
        _stamped(redacted[1], "allow"),
    ]


@pytest.mark.parametrize("kind", ["episode_sft", "episode_rl"])
def test_an_episode_takes_the_strictest_consent_of_its_steps(kind: str, tmp_path: Path) -> None:
    episodes = group_episodes(_episode_rows())
    config = EpisodeExportConfig(
        kind=kind,  # type: ignore[arg-type]
        out_dir=tmp_path,
        scrub_pii=False,
        split=SplitConfig(eval_fraction=0.0),
    )
    dataset = build_episode_dataset(episodes, config)
    text = _text([*dataset.train, *dataset.eval])
    assert dataset.counts.episodes_read == 3 and dataset.counts.records_built == 2
    assert dataset.counts.withheld == {"deny": 1} and dataset.counts.redacted == 1
    assert DENIED not in text and SECRET not in text and EMAIL not in text
    assert "<SECRET_" in text and "dev@acme-corp.io" in text  # scrub_pii off: allow kept whole
    manifest = export_episodes(episodes, config)
    assert manifest.counts.withheld == {"deny": 1}
    assert DENIED not in (tmp_path / "train.jsonl").read_text()
