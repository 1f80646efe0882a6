"""Client-side labels as the RL loop reads them: every row of the record with its labels joined.

The labels themselves (what a client knows and the gateway never saw, in a JSON file) and the
join of one row are :mod:`traffic.client_labels`'s; they reach the RL loop here, after the fact,
for the verifiers (which task was this?) and for reports and evidence groups per family; never
the gateway, and never the scorer's features. :func:`with_labels` wraps a store so every row the
loop reads carries its labels merged over its recorded tags: one join, in the one place the loop
reads the record.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from rl_loop.store_views import mapped_store
from traffic.client_labels import Labels, label_row, load_labels, save_labels
from traffic.store import StoreBackend

__all__ = ["LABELS_FILE", "Labels", "load_labels", "save_labels", "with_labels"]

LABELS_FILE = "labels.json"  # in a flywheel run's directory


def with_labels(store: StoreBackend, labels: Mapping[str, Mapping[str, str]]) -> StoreBackend:
    """``store`` as the loop reads it: every row with its client-side labels joined (``labels``
    is read at each row, so labels added later, a round's new traffic, are seen)."""
    return mapped_store(store, partial(label_row, labels=labels))
