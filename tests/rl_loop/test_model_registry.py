"""Checkpoint versions recorded in the traffic store's `model_version` table (SQLite here)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rl_loop.model_registry import (
    checkpoint_record,
    lineage,
    list_checkpoints,
    record_checkpoint,
)
from serving.model_config import VERSION_FILE, CheckpointVersion, ModelSpec, ProbeReference
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
