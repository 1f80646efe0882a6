"""Client-side labels of recorded requests: what a client knows and the gateway never saw.

Real clients send no tags, and the gateway routes on what a request says. Whoever runs the loop
may still know more about its own traffic: a benchmark's simulated IDE keeps which task it sent
under each answer's request id, as a team keeps its evaluation set. That knowledge reaches the
RL loop here, after the fact, for the verifiers (which task was this?) and for reports and
evidence groups per family; never the gateway, and never the scorer's features.

A labels file is JSON ``{"<inference id>": {"family": ..., "task_id": ..., ...}, ...}``.
:func:`with_labels` wraps a store so every row the loop reads carries its labels merged over its
recorded tags: one join, in the one place the loop reads the record.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

from traffic.store import InferenceFilter, InferenceRow, StoreBackend
from traffic.store.config import DEFAULT_READ_BATCH_SIZE

Labels = dict[str, dict[str, str]]
LABELS_FILE = "labels.json"  # in a flywheel run's directory


def load_labels(path: Path) -> Labels:
    """The labels in ``path`` (empty when the file does not exist)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    return {str(k): {str(a): str(b) for a, b in v.items()} for k, v in data.items()}


def save_labels(labels: Mapping[str, Mapping[str, str]], path: Path) -> None:
    """Write ``labels`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(labels, sort_keys=True))
    os.replace(tmp, path)


class _LabeledStore:
    """A store whose rows carry their labels in ``inference.tags``; the rest is delegated."""

    def __init__(self, store: StoreBackend, labels: Mapping[str, Mapping[str, str]]) -> None:
        self._store = store
        self._labels = labels

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def iter_inferences(
        self,
        filters: InferenceFilter | None = None,
        batch_size: int = DEFAULT_READ_BATCH_SIZE,
        *,
        with_shadows: bool = False,
    ) -> AsyncIterator[InferenceRow]:
        rows = self._store.iter_inferences(filters, batch_size, with_shadows=with_shadows)
        async for row in rows:
            extra = self._labels.get(row.inference.id)
            if extra:
                tags = {**row.inference.tags, **extra}
                inference = dataclasses.replace(row.inference, tags=tags)
                row = dataclasses.replace(row, inference=inference)
            yield row


def with_labels(store: StoreBackend, labels: Mapping[str, Mapping[str, str]]) -> StoreBackend:
    """``store`` as the loop reads it: every row with its client-side labels joined (``labels``
    is read at each row, so labels added later, a round's new traffic, are seen)."""
    return cast(StoreBackend, _LabeledStore(store, labels))
