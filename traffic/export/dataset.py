"""Build a dataset from recorded traffic: parse, scrub, build, dedup, split.

The pipeline, in one pass over the rows (the store's :class:`~traffic.store.InferenceRow`, each
an inference with its feedback) and one over the built records:

1. A row its consent withholds (``deny``: :mod:`traffic.export.consent`) is counted and never
   parsed; the others are parsed into an :class:`~traffic.export.builders.Example` (rows whose
   shape is not understood are counted by reason and skipped); rows the builder will surely not
   use are counted and skipped; PII is scrubbed from every text the record can contain (counts
   are per row used, before dedup; always for a ``redact`` row), and the builder turns it into
   zero or more records. Records go to a
   :class:`RecordSpool`: in memory for :func:`build_dataset`, a temporary file for the exporter
   (which then holds only per-record metadata: ids, exact-hash key, MinHash signature, spool
   position, plus the episode index and, for preference pairs, the graded candidate answers).
2. Records are put in output order (latest source row id, then content digest), so the input
   order never matters; exact and near duplicates are dropped, the earliest copy kept.
3. The split (:mod:`traffic.export.split`) assigns whole episodes to train or eval; the
   lineage (:mod:`traffic.export.lineage`) lists each split's source row ids and hashes its
   records.

:func:`build_dataset` returns the records of each split as Python objects (what the RL loop
trains on, with no file in between); :func:`traffic.export.export.export_dataset` writes the same
records as files. The same rows and config give the same records, in the same order, either way.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sized
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field
from tqdm import tqdm

from traffic.export.builders import BuiltRecord, Example, example_of, make_builder
from traffic.export.config import DatasetConfig, DatasetKind, DedupConfig
from traffic.export.consent import ConsentTally
from traffic.export.conversation import UnsupportedShape
from traffic.export.dedup import Deduplicator, Fingerprint
from traffic.export.lineage import DatasetLineage, record_digest
from traffic.export.pii import CachingScrubber, TextScrub, scrub_messages, scrub_text, scrub_turn
from traffic.export.split import EpisodeStarts, RowTime, Split, assign_splits, record_split
from traffic.export.wire_formats import LegacyTranslator
from traffic.export.writers import serialize
from traffic.store.records import InferenceRow

SPLITS: tuple[Split, ...] = ("train", "eval")


class ExportCounts(BaseModel):
    """How many rows and records went where. ``withheld``: rows left out by their consent, by
    reason (``deny``, ``unknown``, ``unstamped``: :mod:`traffic.export.consent`), counted in
    ``rows_read``; ``redacted``: rows that reached the builder scrubbed because of theirs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows_read: int
    records_built: int
    skipped: dict[str, int]
    exact_duplicates: int
    near_duplicates: int
    straddling_split: int
    train: int
    eval: int
    withheld: dict[str, int] = Field(default_factory=dict)
    redacted: int = 0


class RecordSpool(Protocol):
    """Where built records wait while dedup and the split are decided."""

    def append(self, record: dict[str, Any], data: bytes) -> int:
        """Keep ``record`` (``data`` is its JSONL form); returns the handle to fetch it by."""
        ...


class MemorySpool:
    """Records kept as the builders made them."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def append(self, record: dict[str, Any], data: bytes) -> int:
        self.records.append(record)
        return len(self.records) - 1


@dataclass(frozen=True, slots=True)
class Stashed:
    """A record's handle in the spool and what sorting and the split need of it."""

    sort_id: str
    digest: bytes
    source_ids: tuple[str, ...]
    keys: frozenset[str]
    ref: int


@dataclass(frozen=True, slots=True)
class Collected:
    """The records kept in each split (in output order, as spool handles) and the counts."""

    parts: dict[Split, list[Stashed]]
    counts: ExportCounts
    pii: dict[str, int]
    lineage: DatasetLineage


@dataclass(frozen=True, slots=True)
class Dataset:
    """A dataset built in memory: each split's records in output order, what was counted, and
    its lineage (the rows it was built from, its hashes).

    A record is exactly what a line of the exported JSONL file holds (see
    :mod:`traffic.export.builders` for each kind's format)."""

    kind: DatasetKind
    train: list[dict[str, Any]]
    eval: list[dict[str, Any]]
    counts: ExportCounts
    pii: dict[str, int]
    lineage: DatasetLineage


def scrub_example(
    example: Example, scrub: TextScrub = scrub_text, *, tags: bool = False
) -> tuple[Example, Counter[str]]:
    """``example`` with PII scrubbed (by ``scrub``) from its prompt, answer and user texts, and
    from its tag values when ``tags`` (a row whose consent is ``redact``)."""
    prompt, counts = scrub_messages(example.prompt, scrub)
    scrubbed_tags = dict(example.tags)
    if tags:
        for name, value in example.tags.items():
            scrubbed_tags[name], found = scrub(value)
            counts.update(found)
    answer = scrub_turn(example.answer, scrub, counts)
    edited, demonstration = example.feedback.edited_text, example.feedback.demonstration_text
    if edited is not None:
        edited, found = scrub(edited)
        counts.update(found)
    if demonstration is not None:
        demonstration, found = scrub(demonstration)
        counts.update(found)
    feedback = dataclasses.replace(
        example.feedback, edited_text=edited, demonstration_text=demonstration
    )
    scrubbed = dataclasses.replace(
        example, prompt=prompt, answer=answer, feedback=feedback, tags=scrubbed_tags
    )
    return scrubbed, counts


def build_dataset(
    rows: Iterable[InferenceRow],
    config: DatasetConfig,
    *,
    legacy: LegacyTranslator | None = None,
    progress: bool = False,
) -> Dataset:
    """Build the dataset ``config.kind`` from ``rows`` (consumed once, in any order), in memory.

    ``legacy`` reads records written before their canonical fields
    (:mod:`traffic.export.wire_formats`); without it those are skipped and counted."""
    spool = MemorySpool()
    collected = collect(rows, config, spool, legacy=legacy, progress=progress)
    train, eval_ = ([spool.records[s.ref] for s in collected.parts[p]] for p in SPLITS)
    return Dataset(config.kind, train, eval_, collected.counts, collected.pii, collected.lineage)


def collect(
    rows: Iterable[InferenceRow],
    config: DatasetConfig,
    spool: RecordSpool,
    *,
    legacy: LegacyTranslator | None = None,
    progress: bool = False,
) -> Collected:
    """Steps 1-3 of the module docstring: ``rows`` built into ``spool``, deduplicated, split."""
    builder = make_builder(config.kind, config.build)
    hasher = Deduplicator(config.dedup)  # fingerprints only; classification comes later
    scrub = CachingScrubber()
    consent = ConsentTally(config.unstamped_training_use)
    starts = EpisodeStarts()
    times: dict[str, RowTime] = {}
    skipped: Counter[str] = Counter()
    pii: Counter[str] = Counter()
    stashed: list[Stashed] = []
    fingerprints: list[Fingerprint] = []  # parallel to stashed
    rows_read = 0
    total = len(rows) if isinstance(rows, Sized) else None

    def stash(records: list[BuiltRecord]) -> None:
        for record in records:
            stashed.append(_stash(record, spool))
            fingerprints.append(hasher.fingerprint(record.exact_text, record.near_text))

    for row in tqdm(rows, total=total, disable=not progress, desc="export", unit="row"):
        rows_read += 1
        inference = row.inference
        row_time = RowTime(inference.id, inference.ts, inference.episode_id)
        starts.add(row_time)
        use = consent.admit((inference.training_use,))
        if use is None:  # never parsed: nothing of it reaches a record
            continue
        try:
            example = example_of(row, legacy)
        except UnsupportedShape as exc:
            skipped[exc.reason] += 1
            continue
        times[row_time.id] = row_time
        reason = builder.skip_reason(example)
        if reason is not None:  # decided before the costly scrubbing
            skipped[reason] += 1
            continue
        if use == "redact":
            consent.redacted += 1
        if config.scrub_pii or use == "redact":
            example, found = scrub_example(example, scrub, tags=use == "redact")
            pii.update(found)
        stash(builder.add(example))
    stash(builder.finish())
    skipped.update(builder.skipped)

    kept, verdicts = _deduplicate(stashed, fingerprints, config.dedup)
    fingerprints.clear()  # the signatures are the bulk of the memory held
    assignment = assign_splits(
        sorted({times[i] for s in kept for i in s.source_ids}, key=lambda t: t.id),
        config.split,
        starts,
    )
    parts: dict[Split, list[Stashed]] = {"train": [], "eval": []}
    straddling = 0
    for s in kept:
        where = record_split(s.source_ids, assignment)
        if where is None:
            straddling += 1
        else:
            parts[where].append(s)
    counts = ExportCounts(
        rows_read=rows_read,
        records_built=len(stashed),
        skipped=dict(sorted(skipped.items())),
        exact_duplicates=verdicts["exact"],
        near_duplicates=verdicts["near"],
        straddling_split=straddling,
        train=len(parts["train"]),
        eval=len(parts["eval"]),
        withheld=consent.counts(),
        redacted=consent.redacted,
    )
    lineage = DatasetLineage.of(
        config.kind, {p: [(s.source_ids, s.digest) for s in parts[p]] for p in SPLITS}
    )
    return Collected(parts, counts, dict(sorted(pii.items())), lineage)


def _stash(record: BuiltRecord, spool: RecordSpool) -> Stashed:
    data = serialize(record.record)
    return Stashed(
        sort_id=record.sort_id,
        digest=record_digest(data),
        source_ids=tuple(sorted(record.source_ids)),
        keys=frozenset(record.record),
        ref=spool.append(record.record, data),
    )


def _deduplicate(
    stashed: list[Stashed], fingerprints: list[Fingerprint], config: DedupConfig
) -> tuple[list[Stashed], Counter[str]]:
    """Records kept, in output order (latest source row, then content digest), and how many of
    each verdict; the earliest copy of a duplicate is the one kept."""
    order = sorted(range(len(stashed)), key=lambda i: (stashed[i].sort_id, stashed[i].digest))
    dedup = Deduplicator(config)
    verdicts: Counter[str] = Counter()
    kept: list[Stashed] = []
    for i in order:
        verdict = dedup.classify(fingerprints[i])
        verdicts[verdict] += 1
        if verdict == "unique":
            kept.append(stashed[i])
    return kept, verdicts
