"""Checkpoint versions recorded in the traffic store's `model_version` table (SQLite here), each
linked to the datasets that trained it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rl_loop.config import DataConfig
from rl_loop.datasets import build_round_data
from rl_loop.model_registry import (
    checkpoint_datasets,
    checkpoint_record,
    lineage,
    list_checkpoints,
    record_checkpoint,
    trained_on,
    write_trained_on,
)
from rl_loop.store_views import mapped_store
from serving.model_config import VERSION_FILE, CheckpointVersion, ModelSpec, ProbeReference
from tests.rl_loop.test_datasets import _record
from traffic.store import StoreBackend


def write_checkpoint(root: Path, version_id: str, parent: str | None, **extra: object) -> Path:
    directory = root / version_id
    directory.mkdir()
    version = CheckpointVersion.model_validate(
        {
            "version_id": version_id,
            "parent": parent,
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
            "spec": ModelSpec(),
            "seed": 0,
            **extra,
        }
    )
    (directory / VERSION_FILE).write_text(version.model_dump_json(exclude_defaults=True))
    return directory


async def test_a_trained_checkpoint_is_recorded_then_promoted(
    store: StoreBackend, tmp_path: Path
) -> None:
    base = write_checkpoint(tmp_path, "base-000000000001", None)
    trained = write_checkpoint(
        tmp_path,
        "pretrain-000000000002",
        "base-000000000001",
        metadata={"kind": "base-training", "steps": 300},
        eval={"held_out_ppl": 42.5},
        probe=ProbeReference(prompt_token_ids=(1, 2, 3), logprobs=(-1.0, -2.0)),
    )
    await record_checkpoint(store, base, "promoted")
    written = await record_checkpoint(store, trained)
    assert written.status == "candidate" and written.path == str(trained.resolve())
    await record_checkpoint(store, trained, "promoted")
    await record_checkpoint(store, base, "retired")

    rows = {r.id: r for r in await list_checkpoints(store)}
    assert set(rows) == {"base-000000000001", "pretrain-000000000002"}
    row = rows["pretrain-000000000002"]
    assert row.parent == "base-000000000001" and row.status == "promoted"
    assert row.eval == {"held_out_ppl": 42.5}
    assert row.metadata["steps"] == 300 and row.metadata["spec"]["hidden_size"] == 128
    assert row.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert [r.id for r in await list_checkpoints(store, status="retired")] == ["base-000000000001"]
    assert [r.id for r in await lineage(store, "pretrain-000000000002")] == [
        "pretrain-000000000002",
        "base-000000000001",
    ]


async def test_recording_twice_changes_nothing(store: StoreBackend, tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path, "base-00000000000a", None)
    await record_checkpoint(store, checkpoint)
    await record_checkpoint(store, checkpoint)
    assert len(await list_checkpoints(store)) == 1


def test_an_unknown_status_is_refused(tmp_path: Path) -> None:
    checkpoint = write_checkpoint(tmp_path, "base-00000000000b", None)
    with pytest.raises(ValueError, match="candidate"):
        checkpoint_record(checkpoint, "live")  # type: ignore[arg-type]


async def test_a_checkpoint_recorded_by_the_loop_links_the_datasets_of_its_round(
    store: StoreBackend, tmp_path: Path
) -> None:
    ids = await _record(store)
    data = await build_round_data(store, DataConfig(eval_fraction=0.25), pairs=True)
    assert [d.lineage.kind for d in data.datasets] == ["sft", "rl_prompts", "preference_trl"]
    checkpoint = write_checkpoint(tmp_path, "sft-00000000000c", None)
    assert trained_on(checkpoint) == []
    write_trained_on(checkpoint, data.datasets)  # what the loop does once the weights are saved
    write_trained_on(checkpoint, data.datasets[:1])  # named already: no second copy
    assert trained_on(checkpoint) == data.datasets

    view = mapped_store(store, lambda row: row)  # the flywheel records through a view
    await record_checkpoint(view, checkpoint)
    await record_checkpoint(store, checkpoint, "promoted")  # a status change links nothing new
    linked = await checkpoint_datasets(store, "sft-00000000000c")
    assert sorted(d.lineage.sha256 for d in linked) == sorted(
        d.lineage.sha256 for d in data.datasets
    )
    prompts = next(d for d in linked if d.lineage.kind == "rl_prompts")
    assert prompts.lineage.ids() == sorted(ids)  # every successful row is an RL prompt
    assert prompts.config["split"]["eval_fraction"] == 0.25 and prompts.location is None
    sft = next(d for d in linked if d.lineage.kind == "sft")
    assert sft.lineage.ids() == sorted(ids[:6])  # the accepted answers only
    links = await store.dataset_links([d.lineage.sha256 for d in data.datasets])
    assert len(links) == len(data.datasets)
