"""Export a dataset from recorded traffic as files: the CLI's and the admin API's output, and what
a trainer that pulls files reads.

The dataset is built as :mod:`traffic.export.dataset` says (parse, scrub, build, dedup, split),
its records spooled to a temporary file so memory holds only per-record metadata; then
``train``/``eval`` files are written as JSONL and/or Parquet (:mod:`traffic.export.writers`),
and ``manifest.json`` with the config, counts, SHA-256 of every file and the dataset's lineage
(:mod:`traffic.export.lineage`: the ids of the rows it was built from, its hashes). The same rows
and config give byte-identical data files; only the manifest's ``created_at`` changes.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict
from tqdm import tqdm

from traffic.export.builders import columns_for
from traffic.export.config import BuildConfig, DatasetKind, DedupConfig, ExportConfig, SplitConfig
from traffic.export.dataset import SPLITS, ExportCounts, Stashed, collect, scrub_example
from traffic.export.lineage import DatasetLineage
from traffic.export.split import Split
from traffic.export.wire_formats import LegacyTranslator
from traffic.export.writers import (
    FileEntry,
    Spool,
    remove_files,
    write_jsonl,
    write_manifest,
    write_parquet,
)
from traffic.store.records import InferenceRow

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
_OPTIONAL_COLUMNS = frozenset({"tools"})


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
    lineage: DatasetLineage | None = None  # None: written before lineage was


def export_dataset(
    rows: Iterable[InferenceRow],
    config: ExportConfig,
    progress: bool = False,
    *,
    legacy: LegacyTranslator | None = None,
) -> ExportManifest:
    """Build the dataset ``config.kind`` from ``rows`` into ``config.out_dir``.

    Writes ``train``/``eval`` in each of ``config.formats`` and ``manifest.json``, removes
    outputs of other formats left by an earlier run in the same folder, and returns the
    manifest. Rows are consumed once, in any order; ``legacy`` as for
    :func:`~traffic.export.dataset.build_dataset`.
    """
    out_dir = config.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    with Spool(out_dir) as spool:
        collected = collect(rows, config, spool, legacy=legacy, progress=progress)
        files = _write_outputs(config, spool, collected.parts, progress)
    manifest = ExportManifest(
        schema_version=SCHEMA_VERSION,
        kind=config.kind,
        created_at=datetime.now(UTC),
        config=config,
        filters=config.filters,
        counts=collected.counts,
        pii=collected.pii,
        files=files,
        versions={"pyarrow": importlib.metadata.version("pyarrow"), "orjson": orjson.__version__},
        lineage=collected.lineage,
    )
    write_manifest(out_dir / "manifest.json", manifest)
    return manifest


def _write_outputs(
    config: ExportConfig, spool: Spool, parts: dict[Split, list[Stashed]], progress: bool
) -> dict[str, FileEntry]:
    files: dict[str, FileEntry] = {}
    wanted = {f"{split}.{fmt}" for split in SPLITS for fmt in config.formats}
    stale = {f"{split}.{fmt}" for split in SPLITS for fmt in ("jsonl", "parquet")} - wanted
    remove_files(config.out_dir, sorted(stale))
    total = sum(len(p) for p in parts.values()) * len(config.formats)
    bar = tqdm(total=total, disable=not progress, desc="write", unit="record")
    with bar:
        for split in SPLITS:
            part = parts[split]

            def lines(part: list[Stashed] = part) -> Iterable[bytes]:
                for s in part:
                    bar.update()
                    yield spool.read(s.ref)

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
