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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, get_args

from serving.build import read_version
from traffic.store import ModelVersionRecord, StoreBackend

ModelStatus = Literal["candidate", "promoted", "rejected", "retired"]
MODEL_STATUSES: tuple[str, ...] = get_args(ModelStatus)


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


async def record_checkpoint(
    store: StoreBackend, checkpoint_dir: Path, status: ModelStatus = "candidate"
) -> ModelVersionRecord:
    """Insert or update the row of `checkpoint_dir` with `status`; returns what was written."""
    record = checkpoint_record(checkpoint_dir, status)
    await store.upsert_model_version(record)
    return record


async def list_checkpoints(
    store: StoreBackend, *, status: ModelStatus | None = None
) -> list[ModelVersionRecord]:
    """Recorded versions, oldest first, optionally only those with `status`."""
    records = await store.list_model_versions()
    return [r for r in records if status is None or r.status == status]


async def lineage(store: StoreBackend, version_id: str) -> list[ModelVersionRecord]:
    """`version_id` and its recorded ancestors, newest first (stops at an unrecorded parent)."""
    by_id = {r.id: r for r in await store.list_model_versions()}
    chain: list[ModelVersionRecord] = []
    current: str | None = version_id
    while current is not None and current in by_id and len(chain) < len(by_id):
        chain.append(by_id[current])
        current = by_id[current].parent
    return chain
