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
from collections.abc import Mapping
from pathlib import Path

from rl_loop.store_views import mapped_store
from traffic.store import InferenceRow, StoreBackend

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


def with_labels(store: StoreBackend, labels: Mapping[str, Mapping[str, str]]) -> StoreBackend:
    """``store`` as the loop reads it: every row with its client-side labels joined (``labels``
    is read at each row, so labels added later, a round's new traffic, are seen)."""

    def labelled(row: InferenceRow) -> InferenceRow:
        extra = labels.get(row.inference.id)
        if not extra:
            return row
        inference = dataclasses.replace(row.inference, tags={**row.inference.tags, **extra})
        return dataclasses.replace(row, inference=inference)

    return mapped_store(store, labelled)
