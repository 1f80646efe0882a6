"""Every file the exporters write: the record spool, JSONL, Parquet and the manifest.

Output files are written under a temporary name and renamed into place, so a reader never sees
half a file. Nothing here writes wall-clock time or anything else that varies between runs:
the same records give byte-identical files (for a given pyarrow version).

Parquet representation: string fields are ``string``; every nested field is Arrow's canonical
JSON extension type (``arrow.json``, UTF-8 storage), a list of objects as ``list<arrow.json>``
with one JSON document per element. Chat messages and tool schemas vary in keys and value
types from record to record, which rules out one fixed struct; with the JSON type
``datasets.load_dataset("parquet")`` decodes each value to exactly the Python object the JSONL
holds (``datasets.Json`` feature), and other readers see plain JSON strings.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    import pyarrow as pa

ColumnType = Literal["string", "json", "json_list"]

_PARQUET_BATCH = 1024
_HASH_CHUNK = 1 << 20


class FileEntry(BaseModel):
    """One written file: its name in the output folder, size, record count and SHA-256."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str
    bytes: int
    records: int


class Spool:
    """Temporary append-only file of serialized records, read back by handle (a
    :class:`~traffic.export.dataset.RecordSpool`).

    Lets the exporter stream rows while keeping only small per-record metadata in memory; the
    file is anonymous and disappears on :meth:`close`.
    """

    def __init__(self, directory: Path) -> None:
        # Owned by the spool and closed in close(); a with-block cannot span its lifetime.
        self._file: IO[bytes] = tempfile.TemporaryFile(dir=directory)  # noqa: SIM115
        self._end = 0
        self._spans: list[tuple[int, int]] = []  # (offset, length) by handle

    def append(self, record: Mapping[str, Any], data: bytes) -> int:
        """Store ``data``, the serialized ``record``; returns the handle for :meth:`read`."""
        self._file.seek(self._end)
        self._file.write(data)
        self._spans.append((self._end, len(data)))
        self._end += len(data)
        return len(self._spans) - 1

    def read(self, ref: int) -> bytes:
        offset, length = self._spans[ref]
        self._file.seek(offset)
        return self._file.read(length)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Spool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def serialize(record: Mapping[str, Any]) -> bytes:
    """The JSONL form of a record: compact JSON, UTF-8, keys in insertion order, no newline."""
    return orjson.dumps(record)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _finish(tmp: Path, path: Path, records: int) -> FileEntry:
    os.replace(tmp, path)
    return FileEntry(
        path=path.name, sha256=sha256_of(path), bytes=path.stat().st_size, records=records
    )


def write_jsonl(path: Path, lines: Iterable[bytes]) -> FileEntry:
    """Write one serialized record per line (each ``\\n``-terminated)."""
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with tmp.open("wb") as f:
        for line in lines:
            f.write(line)
            f.write(b"\n")
            count += 1
    return _finish(tmp, path, count)


def parquet_schema(columns: Sequence[tuple[str, ColumnType]]) -> pa.Schema:
    import pyarrow as pa  # ~25 MB: only where Parquet is written, never on a gateway's start path

    """Arrow schema for ``columns`` (see the module docstring for the representation)."""
    types = {"string": pa.string(), "json": pa.json_(), "json_list": pa.list_(pa.json_())}
    return pa.schema([pa.field(name, types[kind], nullable=True) for name, kind in columns])


def _column(values: list[Any], kind: ColumnType) -> pa.Array:
    import pyarrow as pa

    if kind == "string":
        return pa.array(values, type=pa.string())
    if kind == "json":
        texts = [None if v is None else orjson.dumps(v).decode() for v in values]
        return pa.array(texts, type=pa.string()).cast(pa.json_())
    nested = [None if v is None else [orjson.dumps(item).decode() for item in v] for v in values]
    return pa.array(nested, type=pa.list_(pa.string())).cast(pa.list_(pa.json_()))


def write_parquet(
    path: Path, records: Iterable[Mapping[str, Any]], columns: Sequence[tuple[str, ColumnType]]
) -> FileEntry:
    """Write ``records`` as Parquet (zstd) with one column per entry of ``columns``; a field a
    record lacks is null."""
    schema = parquet_schema(columns)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    import pyarrow.parquet as pq

    with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
        batch: list[Mapping[str, Any]] = []
        for record in records:
            batch.append(record)
            count += 1
            if len(batch) == _PARQUET_BATCH:
                writer.write_table(_table(batch, columns, schema))
                batch = []
        if batch:
            writer.write_table(_table(batch, columns, schema))
    return _finish(tmp, path, count)


def _table(
    batch: list[Mapping[str, Any]], columns: Sequence[tuple[str, ColumnType]], schema: pa.Schema
) -> pa.Table:
    import pyarrow as pa

    arrays = [_column([r.get(name) for r in batch], kind) for name, kind in columns]
    return pa.Table.from_arrays(arrays, schema=schema)


def write_manifest(path: Path, manifest: BaseModel) -> FileEntry:
    """Write a pydantic model as indented JSON."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(manifest.model_dump_json(indent=2).encode() + b"\n")
    return _finish(tmp, path, 1)


def remove_files(directory: Path, names: Iterable[str]) -> None:
    """Delete the named files in ``directory`` when present (stale outputs of another run)."""
    for name in names:
        (directory / name).unlink(missing_ok=True)
