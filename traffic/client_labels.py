"""Client-side labels of recorded requests: what a client knows and the gateway never saw.

Real clients send no tags, and the gateway routes on what a request says. Whoever trains on the
record may still know more about its own traffic: a benchmark's simulated IDE keeps which task
it sent under each answer's request id, as a team keeps its evaluation set. A labels file is
JSON ``{"<inference id>": {"family": ..., "task_id": ..., ...}, ...}``; a row is read with its
labels merged over its recorded tags (:func:`label_row`), by the RL loop (``rl_loop.labels``)
and by whoever rebuilds a dataset the loop built (``traffic.export.lineage_store``: a dataset
is what its rows *and* the labels joined to them held).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path

from traffic.store import InferenceRow

Labels = dict[str, dict[str, str]]


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


def label_row(row: InferenceRow, labels: Mapping[str, Mapping[str, str]]) -> InferenceRow:
    """``row`` with its labels (if any) merged over its recorded tags."""
    extra = labels.get(row.inference.id)
    if not extra:
        return row
    inference = dataclasses.replace(row.inference, tags={**row.inference.tags, **extra})
    return dataclasses.replace(row, inference=inference)
