"""Lineage read back from the store: the rows that trained a checkpoint, the datasets and
checkpoints that used a row, and a dataset rebuilt from its rows to check its hash.

- :func:`checkpoint_lineage`: a checkpoint's datasets (the store's ``dataset`` and
  ``model_dataset`` tables) with their decoded lineage (:mod:`traffic.export.lineage`), and its
  recorded ancestors' too when asked (:mod:`traffic.store.versions`: a checkpoint trained from
  another learned from that one's data as well).
- :func:`record_uses`: the datasets that list a row (their bounds read first; only the id sets
  that may hold it are decoded), the checkpoints trained on them, and those checkpoints'
  recorded descendants, which inherit what their ancestors learned.
- :func:`records_uses`: the same for a set of rows (what a forget taints), each id set decoded
  once; :func:`stored_rows`: the rows a lineage names that the store still holds.
- :func:`rebuild_matches`: an exporter's dataset (``sft``, ``preference_*``, ``rl_prompts``)
  built again, with the config it was built with, from the rows its lineage names as the store
  holds them now, and its hash compared: a row deleted or changed since makes it differ.
  Episode datasets are not rebuilt here: which episodes they took is their builder's choice
  (``rl_loop.agent_data``).

The lineage is kept apart from the rows: a row deleted (forgotten) is still found in the datasets
that listed it, and so are the checkpoints trained on them.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import get_args

from tqdm import tqdm

from traffic.client_labels import label_row
from traffic.export.config import DatasetConfig, DatasetKind
from traffic.export.lineage import DatasetLineage, Part, lineage_of
from traffic.export.wire_formats import LegacyTranslator
from traffic.store import (
    DatasetRecord,
    InferenceFilter,
    InferenceRow,
    ModelVersionRecord,
    StoreBackend,
    id_time,
)
from traffic.store.versions import descendants, version_chain


@dataclass(frozen=True, slots=True)
class LinkedDataset:
    """A dataset checkpoint ``checkpoint`` was trained on, whose files are at ``location``."""

    checkpoint: str
    location: str | None
    record: DatasetRecord
    lineage: DatasetLineage


@dataclass(frozen=True, slots=True)
class CheckpointLineage:
    """A checkpoint (first in ``checkpoints``, then its ancestors when asked) and the datasets
    that trained them."""

    checkpoints: list[ModelVersionRecord]
    datasets: list[LinkedDataset]

    def ids(self) -> list[str]:
        """The rows every dataset was built from, sorted, each once."""
        return sorted({i for d in self.datasets for i in d.lineage.ids()})


async def checkpoint_lineage(
    store: StoreBackend, version_id: str, *, ancestors: bool = False
) -> CheckpointLineage | None:
    """The datasets that trained ``version_id`` (and its recorded ancestors when
    ``ancestors``); None when no such checkpoint is recorded."""
    versions = {v.id: v for v in await store.list_model_versions()}
    if version_id not in versions:
        return None
    chain = version_chain(versions, version_id) if ancestors else [versions[version_id]]
    linked = await store.datasets_of([v.id for v in chain])
    datasets = [
        LinkedDataset(link.model_version_id, link.location, record, lineage_of(record))
        for link, record in linked
    ]
    return CheckpointLineage(chain, datasets)


@dataclass(frozen=True, slots=True)
class RecordUses:
    """Where a row went: ``datasets`` that list it (with the split it is in), the checkpoints
    ``trained`` on them (checkpoint -> those datasets' ids), and checkpoints that
    ``inherited`` it (descendant -> the trained ancestor it descends from)."""

    datasets: list[tuple[DatasetRecord, Part]]
    trained: dict[str, list[str]]
    inherited: dict[str, str]


async def record_uses(store: StoreBackend, row_id: str, *, progress: bool = False) -> RecordUses:
    """The datasets and checkpoints that used row ``row_id`` (stored or deleted since)."""
    candidates = [
        dataset_id
        for dataset_id, first, last in await store.dataset_bounds()
        if first is not None and last is not None and first <= row_id <= last
    ]
    using: list[tuple[DatasetRecord, Part]] = []
    for dataset_id in tqdm(candidates, disable=not progress, desc="lineage", unit="dataset"):
        for record in await store.get_datasets([dataset_id]):  # one id set in memory at a time
            part = lineage_of(record).part_of(row_id)
            if part is not None:
                using.append((record, part))
    trained: dict[str, list[str]] = {}
    for link in await store.dataset_links([record.id for record, _ in using]):
        trained.setdefault(link.model_version_id, []).append(link.dataset_id)
    versions = {v.id: v for v in await store.list_model_versions()}
    return RecordUses(using, trained, descendants(versions, list(trained)))


@dataclass(frozen=True, slots=True)
class Rebuilt:
    """A dataset rebuilt from its rows: its hash, whether it is the recorded one, and how many
    of the rows its lineage names the store no longer holds."""

    sha256: str
    matches: bool
    missing: int


async def rebuild_matches(
    store: StoreBackend,
    record: DatasetRecord,
    *,
    legacy: LegacyTranslator | None = None,
    labels: Mapping[str, Mapping[str, str]] | None = None,
) -> Rebuilt | None:
    """``record`` rebuilt from the rows its lineage names, with the client-side ``labels`` its
    builder joined (``traffic.client_labels``: the RL loop's, a flywheel run's
    ``labels.json``); None when this cannot rebuild it (not an exporter's kind, no config
    recorded, ids that carry no time)."""
    # Imported here: the command line imports this module, and `switchyard serve` must not pay
    # for importing the dataset pipeline (docs/recording.md, "Figures behind traffic/'s choices").
    from traffic.export.dataset import build_dataset

    if record.kind not in get_args(DatasetKind) or not record.config:
        return None
    lineage = lineage_of(record)
    wanted = set(lineage.ids())
    rows = await stored_rows(store, lineage)
    if rows is None:
        return None
    if labels:
        rows = [label_row(row, labels) for row in rows]
    fields = DatasetConfig.model_fields
    config = DatasetConfig.model_validate({k: v for k, v in record.config.items() if k in fields})
    dataset = await asyncio.to_thread(build_dataset, rows, config, legacy=legacy)
    rebuilt = dataset.lineage.sha256
    return Rebuilt(rebuilt, rebuilt == record.id, len(wanted) - len(rows))


async def stored_rows(
    store: StoreBackend, lineage: DatasetLineage, *, without: Collection[str] = ()
) -> list[InferenceRow] | None:
    """The rows ``lineage`` names that the store still holds, less ``without``, in id order;
    None when its ids carry no time (no window to read them in)."""
    wanted = set(lineage.ids()).difference(without)
    if lineage.first is None or lineage.last is None or not wanted:
        return []
    try:
        since = id_time(lineage.first)
        until = id_time(lineage.last) + timedelta(milliseconds=1)
    except ValueError:
        return None
    window = InferenceFilter(since=since, until=until)
    return [r async for r in store.iter_inferences(window) if r.inference.id in wanted]


@dataclass(frozen=True, slots=True)
class RecordsUses:
    """Where a set of rows went: each dataset listing any of them, with how many it lists and
    where its files are (every link's location), the checkpoints ``trained`` on those datasets
    and those that ``inherited`` them (as in :class:`RecordUses`)."""

    datasets: list[tuple[DatasetRecord, int, list[str]]]
    trained: dict[str, list[str]]
    inherited: dict[str, str]


async def records_uses(store: StoreBackend, row_ids: Collection[str]) -> RecordsUses:
    """:func:`record_uses` for many rows at once: each candidate id set decoded once."""
    ids = sorted(row_ids)
    using: list[tuple[DatasetRecord, int]] = []
    for dataset_id, first, last in await store.dataset_bounds():
        if first is None or last is None:
            continue
        lo, hi = bisect_left(ids, first), bisect_right(ids, last)
        if lo == hi:
            continue
        for record in await store.get_datasets([dataset_id]):  # one id set in memory at a time
            held = len(set(ids[lo:hi]).intersection(lineage_of(record).ids()))
            if held:
                using.append((record, held))
    links = await store.dataset_links([record.id for record, _ in using])
    trained: dict[str, list[str]] = {}
    where: dict[str, list[str]] = {}
    for link in links:
        trained.setdefault(link.model_version_id, []).append(link.dataset_id)
        if link.location:
            where.setdefault(link.dataset_id, []).append(link.location)
    versions = {v.id: v for v in await store.list_model_versions()}
    datasets = [(r, n, sorted(set(where.get(r.id, [])))) for r, n in using]
    return RecordsUses(datasets, trained, descendants(versions, list(trained)))
