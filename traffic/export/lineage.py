"""A dataset's lineage: the recorded rows it was built from, and hashes of what it holds.

Every dataset builder (:mod:`traffic.export.dataset`: SFT, preference pairs, RL prompts, in
memory or as files; :mod:`traffic.export.episode_export`: agent episodes) returns a
:class:`DatasetLineage` beside its records, and writes it into ``manifest.json``:

- ``train``, ``eval``: the ids of the recorded inferences each split's records were built from
  (:class:`~traffic.export.id_sets.IdSet`, compact): every source row of every record kept. A
  row its consent withheld, one the builder skipped, one whose record was dropped as a duplicate
  is in neither: no text of it is in the dataset. An episode's record lists all its steps.
- ``records_sha256``: SHA-256 over the records, split by split in output order, of each
  record's BLAKE2b-128 of its JSONL line (:func:`record_digest`, what dedup already computes):
  a change to any record (a row's text edited, scrubbed otherwise) changes it.
- ``sha256``: the dataset's identity, over the kind, both id sets' ``sha256`` and
  ``records_sha256``. The same rows and config give the same hash; so do the rows these ids
  name, rebuilt with the same config (:func:`traffic.export.lineage_store.rebuild_matches`),
  unless an episode's first row gave no record and its start moves across the split's cutoff
  (:mod:`traffic.export.split`).

A checkpoint links the datasets that trained it as :class:`DatasetRef` (the lineage, the build
config, where its files are); :func:`dataset_record` and :func:`link_record` make the store's
``dataset`` and ``model_dataset`` rows of one (``StoreBackend.link_datasets``), and
:func:`lineage_of` reads a ``dataset`` row's lineage back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from traffic.export.id_sets import IdSet
from traffic.store.records import DatasetRecord, ModelDatasetRecord

Part = Literal["train", "eval"]
PARTS: tuple[Part, ...] = ("train", "eval")


def record_digest(line: bytes) -> bytes:
    """A record's digest: BLAKE2b-128 of its JSONL line (``traffic.export.writers.serialize``)."""
    return hashlib.blake2b(line, digest_size=16).digest()


class DatasetLineage(BaseModel):
    """What a dataset was built from and what it holds, by hash (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    sha256: str
    records_sha256: str
    train: IdSet
    eval: IdSet

    @classmethod
    def of(
        cls, kind: str, parts: Mapping[Part, Sequence[tuple[Iterable[str], bytes]]]
    ) -> DatasetLineage:
        """The lineage of a dataset whose split ``part`` holds, in output order, the records
        ``parts[part]``: each its source row ids and :func:`record_digest`."""
        content = hashlib.sha256()
        sets: dict[Part, IdSet] = {}
        for part in PARTS:
            records = parts.get(part, ())
            content.update(f"{part} {len(records)}\n".encode())
            for _, digest in records:
                content.update(digest)
            sets[part] = IdSet.of(i for ids, _ in records for i in ids)
        records_sha256 = content.hexdigest()
        return cls(
            kind=kind,
            sha256=_dataset_sha256(kind, sets["train"], sets["eval"], records_sha256),
            records_sha256=records_sha256,
            train=sets["train"],
            eval=sets["eval"],
        )

    @property
    def row_count(self) -> int:
        """How many recorded rows the dataset was built from (a row is in one split only)."""
        return self.train.count + self.eval.count

    @property
    def first(self) -> str | None:
        return min((s.first for s in (self.train, self.eval) if s.first is not None), default=None)

    @property
    def last(self) -> str | None:
        return max((s.last for s in (self.train, self.eval) if s.last is not None), default=None)

    def ids(self) -> list[str]:
        """Every row id, sorted."""
        return sorted([*self.train.ids(), *self.eval.ids()])

    def part_of(self, row_id: str) -> Part | None:
        """The split whose records row ``row_id`` is a source of; None: not in the dataset."""
        return next((p for p in PARTS if getattr(self, p).holds(row_id)), None)

    def consistent(self) -> bool:
        """Whether ``sha256`` is what the id sets and ``records_sha256`` give."""
        expected = _dataset_sha256(self.kind, self.train, self.eval, self.records_sha256)
        return expected == self.sha256


def _dataset_sha256(kind: str, train: IdSet, eval_: IdSet, records_sha256: str) -> str:
    text = f"{kind}\ntrain {train.sha256}\neval {eval_.sha256}\nrecords {records_sha256}\n"
    return hashlib.sha256(text.encode()).hexdigest()


class DatasetRef(BaseModel):
    """A dataset as a checkpoint links it: its lineage, how it was built (the builder's config
    as JSON: with the ids, enough to rebuild it) and where its files are (None: it was built in
    memory)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    lineage: DatasetLineage
    config: dict[str, Any] = Field(default_factory=dict)
    location: str | None = None


def dataset_record(ref: DatasetRef) -> DatasetRecord:
    """The store's ``dataset`` row of ``ref``."""
    lineage = ref.lineage
    return DatasetRecord(
        id=lineage.sha256,
        kind=lineage.kind,
        row_count=lineage.row_count,
        first_id=lineage.first,
        last_id=lineage.last,
        lineage=lineage.model_dump(mode="json"),
        config=ref.config,
    )


def link_record(model_version_id: str, ref: DatasetRef) -> ModelDatasetRecord:
    """The store's ``model_dataset`` row: checkpoint ``model_version_id`` trained on ``ref``."""
    return ModelDatasetRecord(
        model_version_id=model_version_id, dataset_id=ref.lineage.sha256, location=ref.location
    )


def lineage_of(record: DatasetRecord) -> DatasetLineage:
    """The lineage a ``dataset`` row holds; ``ValueError`` when it is not one."""
    return DatasetLineage.model_validate(record.lineage)
