"""The local spool: where records wait, on disk, while the database cannot take them.

Layout of ``spool_dir``::

    segment-<uuid7>.jsonl   records waiting to be replayed, one JSON object per line:
                            {"kind": "inference" | "feedback" | "shadow", "record": {...}}
    rejected.jsonl          dead letters: records the database refused as invalid (or that could
                            not be encoded), with the reason; kept for a person, never replayed

Encoding never stops the spool: a record whose line cannot be encoded (nested deeper than the
encoder's recursion limit, a value JSON cannot hold) goes to the dead letters instead, with the
reason. Lone surrogates round-trip as JSON escapes (``\\udXXX``), NaN and infinities as
Python's json writes them; the database decides about them on replay. A dead letter is one strict
JSON line, ``{"kind", "id", "ts", "record", "error", "at"}``; when the record cannot be written
faithfully, ``record`` is null and ``sketch`` holds a bounded repr of it (at most
``SKETCH_CHARS``), ``sketch_reason`` why. Values JSON cannot hold are written as bounded reprs.

Every append is written, flushed and fsync'd before it returns (and the directory is fsync'd
when a segment is created), so a record the spool took survives a crash of the process. A
segment grows to ``segment_bytes`` and then is sealed; the replayer also seals the open segment
before each pass.

Ownership between processes that share a directory: a process holds an exclusive ``flock`` on
the segment it is appending to, and the replayer claims a segment by taking that lock without
waiting; a segment someone else holds is skipped. So several gateway workers may share a spool
dir, and segments of a crashed process are replayed by whoever starts next. A torn last line
(crash mid-append) is counted and sent to the dead letters, not replayed.

All methods block (file I/O, fsync): call them from a thread (``asyncio.to_thread``). They are
thread-safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, Final, cast

from traffic.store.ids import new_id
from traffic.store.records import (
    FeedbackRecord,
    InferenceRecord,
    JsonText,
    ShadowRecord,
    utc_now,
)

SpoolRecord = InferenceRecord | FeedbackRecord | ShadowRecord

_KINDS: Final = MappingProxyType(
    {"inference": InferenceRecord, "feedback": FeedbackRecord, "shadow": ShadowRecord}
)
_KIND_OF: Final = MappingProxyType({cls: kind for kind, cls in _KINDS.items()})
DEAD_LETTER_FILE: Final = "rejected.jsonl"
SKETCH_CHARS: Final = 16_384  # the most of an unencodable record a dead letter keeps
_REASON_CHARS: Final = 4096
_OBJECT_REPR_CHARS: Final = 1024
_SEGMENT_GLOB: Final = "segment-*.jsonl"


def encode_line(record: SpoolRecord) -> bytes:
    """One spool line; raises (``TypeError``, ``KeyError``, ``RecursionError`` ...) if it cannot."""
    data = _fields(record)
    data["ts"] = record.ts.isoformat()
    line = json.dumps({"kind": _KIND_OF[type(record)], "record": data}, ensure_ascii=False)
    # Only a lone surrogate fails strict UTF-8; as a JSON escape it reads back unchanged.
    return line.encode("utf-8", "backslashreplace") + b"\n"


def decode_line(line: bytes) -> SpoolRecord:
    """Parse one spool line; any ``Exception`` when it is not one (``RecursionError`` too)."""
    obj = json.loads(line)
    data = dict(obj["record"])
    data["ts"] = datetime.fromisoformat(data["ts"])
    cls: type[SpoolRecord] = _KINDS[obj["kind"]]
    return cls(**data)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclasses.dataclass(slots=True)
class SpoolClaim:
    """A segment this process holds the lock of, read into memory."""

    path: Path
    records: list[SpoolRecord]
    bad_lines: list[tuple[bytes, str]]
    _file: BinaryIO

    def remove(self) -> None:
        """Delete the replayed segment, then release it."""
        self.path.unlink(missing_ok=True)
        self._file.close()

    def release(self) -> None:
        """Release without deleting (replay did not finish); a no-op after :meth:`remove`."""
        self._file.close()


class Spool:
    """Append-only JSON-lines segments in one directory."""

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self._segment_bytes = segment_bytes
        self._lock = threading.Lock()
        self._active: BinaryIO | None = None
        self._active_size = 0

    def append(self, records: Sequence[SpoolRecord]) -> tuple[int, int]:
        """Persist ``records``; returns (spooled, dead-lettered because not encodable)."""
        lines: list[bytes] = []
        bad: list[tuple[Any, str]] = []
        for record in records:
            try:
                lines.append(encode_line(record))
            except Exception as e:  # whatever the content: dead-lettered, never raised
                bad.append((record, f"cannot encode for the spool: {_describe(e)}"))
        with self._lock:
            if lines:
                active = self._open_active()
                payload = b"".join(lines)
                active.write(payload)
                active.flush()
                os.fsync(active.fileno())
                self._active_size += len(payload)
                if self._active_size >= self._segment_bytes:
                    self._seal_locked()
            if bad:
                self._dead_letter_locked(bad)
        return len(lines), len(bad)

    def _open_active(self) -> BinaryIO:
        if self._active is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"segment-{new_id()}.jsonl"
            f = path.open("ab")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # new file: nobody holds it
            _fsync_dir(self.directory)
            self._active, self._active_size = f, 0
        return self._active

    def seal(self) -> None:
        """Close the segment being appended to, making it replayable."""
        with self._lock:
            self._seal_locked()

    def _seal_locked(self) -> None:
        if self._active is not None:
            self._active.close()  # releases the flock
            self._active = None

    def segments(self) -> list[Path]:
        """Segment paths, oldest first (including ones other processes hold)."""
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob(_SEGMENT_GLOB))

    def claim(self, path: Path) -> SpoolClaim | None:
        """Lock and read a segment; None when another holder has it or it is gone."""
        try:
            f = path.open("rb")
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            return None
        if os.fstat(f.fileno()).st_nlink == 0:  # replayed and removed while we waited
            f.close()
            return None
        records: list[SpoolRecord] = []
        bad: list[tuple[bytes, str]] = []
        for line in f.read().splitlines():
            if not line.strip():
                continue
            try:
                records.append(decode_line(line))
            except Exception as e:  # torn, nested too deep, not a record: set aside
                bad.append((line, f"unreadable spool line: {_describe(e)}"))
        return SpoolClaim(path, records, bad, f)

    def dead_letter(self, entries: Sequence[tuple[Any, str]]) -> None:
        """Append (record or raw line, reason) pairs to ``rejected.jsonl``, fsync'd.

        Raises only ``OSError`` (the file cannot be written): encoding never fails.
        """
        with self._lock:
            self._dead_letter_locked(entries)

    def _dead_letter_locked(self, entries: Sequence[tuple[Any, str]]) -> None:
        at = utc_now().isoformat()
        lines = [dead_letter_line(item, reason, at) for item, reason in entries]
        self.directory.mkdir(parents=True, exist_ok=True)
        with locked_dead_letters(self.directory, "ab") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        self.seal()


def locked_dead_letters(directory: Path, mode: str) -> BinaryIO:
    """``rejected.jsonl`` opened (``"ab"`` or ``"r+b"``) under an exclusive ``flock``, the file
    the name points at now: a forget rewrites it by renaming a new one into place under the same
    lock (:mod:`traffic.store.spool_forget`), so an append never lands in a replaced file.
    ``FileNotFoundError`` for ``"r+b"`` when there is none."""
    while True:
        f = cast(BinaryIO, (directory / DEAD_LETTER_FILE).open(mode))
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        if os.fstat(f.fileno()).st_nlink:
            return f
        f.close()  # replaced while we waited for the lock


def dead_letter_line(item: object, reason: str, at: str) -> bytes:
    """One line of ``rejected.jsonl`` for a record (or raw spool line); never raises.

    The record is written faithfully when it can be (strict JSON: no NaN, lone surrogates as
    escapes, other values as bounded reprs); otherwise its kind, id and time are kept and the
    rest is sketched: a repr cut at ``SKETCH_CHARS``, built without recursion.
    """
    head: dict[str, Any] = {"kind": None, "id": None, "ts": None}
    with contextlib.suppress(Exception):  # an odd object: its identity stays unknown
        head["kind"] = _KIND_OF.get(type(item))
        if isinstance(getattr(item, "id", None), str):
            head["id"] = _safe_text(item.id, 200)  # type: ignore[attr-defined]
        if isinstance(getattr(item, "ts", None), datetime):
            head["ts"] = item.ts.isoformat()  # type: ignore[attr-defined]
    tail = {"error": _safe_text(reason, _REASON_CHARS), "at": at}
    try:
        if isinstance(item, bytes):
            body: dict[str, Any] = {"line": item.decode("utf-8", "replace"), **tail}
        else:
            body = {**head, "record": _plain(item), **tail}
        text = json.dumps(body, ensure_ascii=False, allow_nan=False, default=_object_repr)
        return text.encode("utf-8", "backslashreplace") + b"\n"
    except Exception as e:  # nested too deep, NaN, a repr that raises, ...: keep what we can
        sketch = {"record": None, "sketch": _sketch(item), "sketch_reason": _describe(e)}
        return json.dumps({**head, **sketch, **tail}, ensure_ascii=False).encode() + b"\n"


def _fields(record: Any) -> dict[str, Any]:
    """A record's fields by name, an encoded JSON field (:class:`JsonText`) as its object (a
    line reads back as the record it stands for)."""
    data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    for name, value in data.items():
        if type(value) is JsonText:
            data[name] = value.parsed()
    return data


def _plain(record: object) -> Any:
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        data = _fields(record)
        if isinstance(data.get("ts"), datetime):
            data["ts"] = data["ts"].isoformat()
        return data
    return record


def _describe(e: BaseException) -> str:
    return _safe_text(f"{type(e).__name__}: {e}", _REASON_CHARS)


def _safe_text(text: str, limit: int) -> str:
    """``text`` cut at ``limit`` characters, lone surrogates as ``\\udXXX``: always encodable."""
    if len(text) > limit:
        text = text[:limit] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _object_repr(value: object) -> str:
    """``json.dumps``'s fallback for values JSON cannot hold: a bounded repr."""
    return _short_repr(value, _OBJECT_REPR_CHARS)


def _short_repr(value: object, limit: int) -> str:
    try:
        text = repr(value[: limit + 1] if isinstance(value, str | bytes) else value)
    except Exception:  # a repr that raises or recurses too deep
        text = f"<{type(value).__name__} object>"
    return _safe_text(text, limit)


class _Piece(str):
    """Literal punctuation in a sketch (told apart from string values, which are repr'd)."""


def _sketch(value: object, limit: int = SKETCH_CHARS) -> str:
    """A repr of ``value`` cut at about ``limit`` characters.

    Iterative, with one iterator per open container, and it stops at ``limit``: bounded time and
    memory whatever the depth or size (every level emits at least one character).
    """
    pieces: list[str] = []
    size = 0
    stack: list[Iterator[object]] = []
    try:
        stack.append(iter((_plain(value),)))
        while stack and size < limit:
            item = next(stack[-1], _END)
            if item is _END:
                stack.pop()
                continue
            if isinstance(item, _Piece):
                piece = str(item)
            elif isinstance(item, dict):
                piece = "{"
                stack.append(_mapping_items(item))
            elif isinstance(item, list | tuple):
                piece = "["
                stack.append(_sequence_items(item))
            else:
                piece = _short_repr(item, limit - size)
            pieces.append(piece)
            size += len(piece)
    except Exception as e:  # a container changed under us, ...: what was sketched so far
        pieces.append(f" <sketch stopped: {_describe(e)}>")
    text = "".join(pieces)
    if stack:  # stopped at the limit
        text = text[:limit] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


_END: Final = object()


def _mapping_items(mapping: dict[Any, Any]) -> Iterator[object]:
    for n, (key, item) in enumerate(mapping.items()):
        yield _Piece((", " if n else "") + _short_repr(key, _OBJECT_REPR_CHARS) + ": ")
        yield item
    yield _Piece("}")


def _sequence_items(sequence: Sequence[Any]) -> Iterator[object]:
    for n, item in enumerate(sequence):
        if n:
            yield _Piece(", ")
        yield item
    yield _Piece("]")
