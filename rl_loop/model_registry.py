"""Checkpoint versions in the traffic store's `model_version` table.

Every checkpoint directory the project writes (`serving.build`, `serving.train_base`,
`serving.fp8`, the RL trainers) carries a `switchyard_version.json`; this module copies that
identity into the store so that served traffic (whose records carry the weights version) can be
joined with the lineage and evaluation of the weights that answered it.

A version's `status` moves along:

    candidate --(gate passed, published to the replicas)--> promoted --(replaced)--> retired
        \\--(gate or post-swap probe failed)--> rejected

`record_checkpoint` is called after training (status `candidate`) and again after promotion or
rejection; it is an upsert keyed by the version id, so calling it twice with the same status
changes nothing. The row's `metadata` holds the checkpoint's own metadata plus its `spec` and
`seed`; `eval` holds its evaluation figures.

Lineage: the trainer writes the datasets a checkpoint was trained on into its directory
(`lineage.json`, `write_trained_on`: each dataset's lineage, config and location,
`traffic.export.lineage`), and every `record_checkpoint` links them to its row (the store's
`dataset` and `model_dataset` tables; links are only ever added). The file travels with the
weights, so whoever records the checkpoint, wherever, links its datasets.

Forgetting (`traffic.forget`) marks tainted the checkpoints trained on a forgotten record and
their descendants: `refuse_tainted` refuses them (promotion and release call it before
publishing) and `record_checkpoint` never records one newly `promoted`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

from serving.build import read_version
from traffic.export.lineage import DatasetRef, dataset_record, lineage_of, link_record
from traffic.store import ModelVersionRecord, StoreBackend
from traffic.store.forgetting import tainted_by
from traffic.store.versions import version_chain

ModelStatus = Literal["candidate", "promoted", "rejected", "retired"]
MODEL_STATUSES: tuple[str, ...] = get_args(ModelStatus)
LINEAGE_FILE = "lineage.json"


class TrainedOn(BaseModel):
    """A checkpoint directory's `lineage.json`: the datasets that trained it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    datasets: tuple[DatasetRef, ...] = ()


def trained_on(checkpoint_dir: Path) -> list[DatasetRef]:
    """The datasets `checkpoint_dir`'s `lineage.json` names (none without one)."""
    path = checkpoint_dir / LINEAGE_FILE
    if not path.exists():
        return []
    return list(TrainedOn.model_validate_json(path.read_text()).datasets)


def write_trained_on(checkpoint_dir: Path, datasets: Sequence[DatasetRef]) -> None:
    """Add `datasets` to `checkpoint_dir`'s `lineage.json` (those named already stay: the same
    weights may come out of two trainings); written whole, then renamed into place."""
    if not datasets:
        return
    merged = {d.lineage.sha256: d for d in trained_on(checkpoint_dir)}
    for d in datasets:
        merged.setdefault(d.lineage.sha256, d)
    path = checkpoint_dir / LINEAGE_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(TrainedOn(datasets=tuple(merged.values())).model_dump_json() + "\n")
    os.replace(tmp, path)


def checkpoint_record(checkpoint_dir: Path, status: ModelStatus) -> ModelVersionRecord:
    """The `model_version` row describing `checkpoint_dir` (read from its version file)."""
    if status not in MODEL_STATUSES:
        raise ValueError(f"unknown model status {status!r}; use one of {MODEL_STATUSES}")
    version = read_version(checkpoint_dir)
    metadata: dict[str, Any] = {
        **version.metadata,
        "spec": version.spec.model_dump(),
        "seed": version.seed,
    }
    return ModelVersionRecord(
        id=version.version_id,
        parent=version.parent,
        created_at=version.created_at,
        path=str(checkpoint_dir.resolve()),
        metadata=metadata,
        eval=dict(version.eval),
        status=status,
    )


class TaintedCheckpoint(Exception):
    """A checkpoint that learned from a forgotten record was to be promoted."""


async def refuse_tainted(store: StoreBackend, checkpoint: Path | str) -> None:
    """Raise `TaintedCheckpoint` when `checkpoint` (a directory or a version id) or a recorded
    ancestor of it is tainted: the gate's and every promotion's check, before publishing."""
    if isinstance(checkpoint, Path):
        version = read_version(checkpoint)
        version_id, parent = version.version_id, version.parent
    else:
        version_id, parent = checkpoint, None
    found = await tainted_by(store, version_id, parent=parent)
    if found:
        why = ", ".join(f"{t.model_version_id} by forget {t.forget_id}" for t in found)
        raise TaintedCheckpoint(
            f"checkpoint {version_id} learned from forgotten records ({why}): it is never "
            "promoted; retrain without them"
        )


async def record_checkpoint(
    store: StoreBackend, checkpoint_dir: Path, status: ModelStatus = "candidate"
) -> ModelVersionRecord:
    """Insert or update the row of `checkpoint_dir` with `status`, and link the datasets its
    `lineage.json` names; returns the row written. `TaintedCheckpoint` when a tainted
    checkpoint not promoted already would become `promoted` (one served already stays so)."""
    record = checkpoint_record(checkpoint_dir, status)
    if status == "promoted":
        known = {v.id: v.status for v in await store.list_model_versions()}
        if known.get(record.id) != "promoted":
            await refuse_tainted(store, record.id)
    await store.upsert_model_version(record)
    datasets = trained_on(checkpoint_dir)
    if datasets:
        await store.link_datasets(
            [dataset_record(d) for d in datasets],
            [link_record(record.id, d) for d in datasets],
        )
    return record


async def checkpoint_datasets(store: StoreBackend, version_id: str) -> list[DatasetRef]:
    """The datasets recorded as having trained `version_id`, read back from the store."""
    return [
        DatasetRef(lineage=lineage_of(dataset), config=dataset.config, location=link.location)
        for link, dataset in await store.datasets_of([version_id])
    ]


async def list_checkpoints(
    store: StoreBackend, *, status: ModelStatus | None = None
) -> list[ModelVersionRecord]:
    """Recorded versions, oldest first, optionally only those with `status`."""
    records = await store.list_model_versions()
    return [r for r in records if status is None or r.status == status]


async def lineage(store: StoreBackend, version_id: str) -> list[ModelVersionRecord]:
    """`version_id` and its recorded ancestors, newest first (stops at an unrecorded parent)."""
    return version_chain({r.id: r for r in await store.list_model_versions()}, version_id)
