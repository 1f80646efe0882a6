"""Export a dataset from recorded traffic: parse, scrub, build, dedup, split, write.

The pipeline, in one pass over the rows and one over the spooled records:

1. Each row is parsed into an :class:`~gateway.export.builders.Example` (rows whose shape is
   not understood are counted by reason and skipped); rows the builder will surely not use are
   counted and skipped; PII is scrubbed from every text the record can contain (counts are per
   row used, before dedup), and the builder turns it into zero or more records. Records go to a
   temporary spool on disk; memory holds only per-record metadata (ids, exact-hash key, MinHash
   signature, spool position) plus the episode index and, for preference pairs, the graded
   candidate answers.
2. Records are put in output order (latest source row id, then content digest), so the input
   order never matters; exact and near duplicates are dropped, the earliest copy kept.
3. The split (:mod:`gateway.export.split`) assigns whole episodes to train or eval.
4. ``train``/``eval`` files are written as JSONL and/or Parquet
   (:mod:`gateway.export.writers`), then ``manifest.json`` with the config, counts and
   SHA-256 of every file. The same rows and config give byte-identical data files; only the
   manifest's ``created_at`` changes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Iterable, Sized
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import pyarrow as pa
from pydantic import BaseModel, ConfigDict
from tqdm import tqdm

from gateway.export.builders import BuiltRecord, Example, columns_for, example_of, make_builder
from gateway.export.config import BuildConfig, DatasetKind, DedupConfig, ExportConfig, SplitConfig
from gateway.export.conversation import AssistantTurn, ToolCall, UnsupportedShape
from gateway.export.dedup import Deduplicator, Fingerprint
from gateway.export.pii import CachingScrubber, TextScrub, scrub_messages, scrub_text
from gateway.export.rows import ExportRow
from gateway.export.split import EpisodeStarts, RowTime, Split, assign_splits, record_split
from gateway.export.writers import (
    FileEntry,
    Spool,
    remove_files,
    serialize,
    write_jsonl,
    write_manifest,
    write_parquet,
)

__all__ = [
    "SCHEMA_VERSION",
    "BuildConfig",
    "DedupConfig",
    "ExportConfig",
    "ExportCounts",
    "ExportManifest",
    "SplitConfig",
    "export_dataset",
    "scrub_example",
]

SCHEMA_VERSION = 1
_SPLITS: tuple[Split, ...] = ("train", "eval")
_OPTIONAL_COLUMNS = frozenset({"tools"})


class ExportCounts(BaseModel):
    """How many rows and records went where."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows_read: int
    records_built: int
    skipped: dict[str, int]
    exact_duplicates: int
    near_duplicates: int
    straddling_split: int
    train: int
    eval: int


class ExportManifest(BaseModel):
    """Everything needed to trust and reproduce an export; written as ``manifest.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    kind: DatasetKind
    created_at: datetime
    config: ExportConfig
    filters: dict[str, Any]
    counts: ExportCounts
    pii: dict[str, int]
    files: dict[str, FileEntry]
    versions: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Stashed:
    """A record's place in the spool and what sorting and the split need of it."""

    sort_id: str
    digest: bytes
    source_ids: tuple[str, ...]
    keys: frozenset[str]
    offset: int
    length: int


def scrub_example(example: Example, scrub: TextScrub = scrub_text) -> tuple[Example, Counter[str]]:
    """``example`` with PII scrubbed (by ``scrub``) from its prompt, answer and user texts."""
    prompt, counts = scrub_messages(example.prompt, scrub)
    answer = example.answer
    if answer is not None:
        content = answer.content
        if content is not None:
            content, found = scrub(content)
            counts.update(found)
        calls = []
        for call in answer.tool_calls:
            arguments, found = scrub(call.arguments)
            counts.update(found)
            calls.append(ToolCall(call.id, call.name, arguments))
        answer = AssistantTurn(content, tuple(calls))
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
    return dataclasses.replace(example, prompt=prompt, answer=answer, feedback=feedback), counts


def export_dataset(
    rows: Iterable[ExportRow], config: ExportConfig, progress: bool = False
) -> ExportManifest:
    """Build the dataset ``config.kind`` from ``rows`` into ``config.out_dir``.

    Writes ``train``/``eval`` in each of ``config.formats`` and ``manifest.json``, removes
    outputs of other formats left by an earlier run in the same folder, and returns the
    manifest. Rows are consumed once, in any order.
    """
    out_dir = config.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    builder = make_builder(config.kind, config.build)
    hasher = Deduplicator(config.dedup)  # fingerprints only; classification comes later
    scrub = CachingScrubber()
    starts = EpisodeStarts()
    times: dict[str, RowTime] = {}
    skipped: Counter[str] = Counter()
    pii: Counter[str] = Counter()
    stashed: list[_Stashed] = []
    fingerprints: list[Fingerprint] = []  # parallel to stashed
    rows_read = 0
    total = len(rows) if isinstance(rows, Sized) else None
    with Spool(out_dir) as spool:

        def stash(records: list[BuiltRecord]) -> None:
            for record in records:
                stashed.append(_stash(record, spool))
                fingerprints.append(hasher.fingerprint(record.exact_text, record.near_text))

        for row in tqdm(rows, total=total, disable=not progress, desc="export", unit="row"):
            rows_read += 1
            row_time = RowTime(row["id"], row["ts"], row.get("episode_id"))
            starts.add(row_time)
            try:
                example = example_of(row)
            except UnsupportedShape as exc:
                skipped[exc.reason] += 1
                continue
            times[row_time.id] = row_time
            reason = builder.skip_reason(example)
            if reason is not None:  # decided before the costly scrubbing
                skipped[reason] += 1
                continue
            if config.scrub_pii:
                example, found = scrub_example(example, scrub)
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
        parts: dict[Split, list[_Stashed]] = {"train": [], "eval": []}
        straddling = 0
        for s in kept:
            where = record_split(s.source_ids, assignment)
            if where is None:
                straddling += 1
            else:
                parts[where].append(s)
        files = _write_outputs(config, spool, parts, progress)

    counts = ExportCounts(
        rows_read=rows_read,
        records_built=len(stashed),
        skipped=dict(sorted(skipped.items())),
        exact_duplicates=verdicts["exact"],
        near_duplicates=verdicts["near"],
        straddling_split=straddling,
        train=len(parts["train"]),
        eval=len(parts["eval"]),
    )
    manifest = ExportManifest(
        schema_version=SCHEMA_VERSION,
        kind=config.kind,
        created_at=datetime.now(UTC),
        config=config,
        filters=config.filters,
        counts=counts,
        pii=dict(sorted(pii.items())),
        files=files,
        versions={"pyarrow": pa.__version__, "orjson": orjson.__version__},
    )
    write_manifest(out_dir / "manifest.json", manifest)
    return manifest


def _stash(record: BuiltRecord, spool: Spool) -> _Stashed:
    data = serialize(record.record)
    offset, length = spool.append(data)
    return _Stashed(
        sort_id=record.sort_id,
        digest=hashlib.blake2b(data, digest_size=16).digest(),
        source_ids=tuple(sorted(record.source_ids)),
        keys=frozenset(record.record),
        offset=offset,
        length=length,
    )


def _deduplicate(
    stashed: list[_Stashed], fingerprints: list[Fingerprint], config: DedupConfig
) -> tuple[list[_Stashed], Counter[str]]:
    """Records kept, in output order (latest source row, then content digest), and how many of
    each verdict; the earliest copy of a duplicate is the one kept."""
    order = sorted(range(len(stashed)), key=lambda i: (stashed[i].sort_id, stashed[i].digest))
    dedup = Deduplicator(config)
    verdicts: Counter[str] = Counter()
    kept: list[_Stashed] = []
    for i in order:
        verdict = dedup.classify(fingerprints[i])
        verdicts[verdict] += 1
        if verdict == "unique":
            kept.append(stashed[i])
    return kept, verdicts


def _write_outputs(
    config: ExportConfig, spool: Spool, parts: dict[Split, list[_Stashed]], progress: bool
) -> dict[str, FileEntry]:
    files: dict[str, FileEntry] = {}
    wanted = {f"{split}.{fmt}" for split in _SPLITS for fmt in config.formats}
    stale = {f"{split}.{fmt}" for split in _SPLITS for fmt in ("jsonl", "parquet")} - wanted
    remove_files(config.out_dir, sorted(stale))
    total = sum(len(p) for p in parts.values()) * len(config.formats)
    bar = tqdm(total=total, disable=not progress, desc="write", unit="record")
    with bar:
        for split in _SPLITS:
            part = parts[split]

            def lines(part: list[_Stashed] = part) -> Iterable[bytes]:
                for s in part:
                    bar.update()
                    yield spool.read(s.offset, s.length)

            if "jsonl" in config.formats:
                entry = write_jsonl(config.out_dir / f"{split}.jsonl", lines())
                files[entry.path] = entry
            if "parquet" in config.formats:
                present: set[str] = set()
                for s in part:
                    present |= s.keys
                columns = [
                    (name, kind)
                    for name, kind in columns_for(config.kind)
                    if name not in _OPTIONAL_COLUMNS or name in present
                ]
                records = (orjson.loads(line) for line in lines())
                entry = write_parquet(config.out_dir / f"{split}.parquet", records, columns)
                files[entry.path] = entry
    return dict(sorted(files.items()))
