"""The local spool: where records wait, on disk, while the database cannot take them.

Layout of ``spool_dir``::

    segment-<uuid7>.jsonl   records waiting to be replayed, one JSON object per line:
                            {"kind": "inference" | "feedback" | "shadow", "record": {...}}
    rejected.jsonl          dead letters: records the database refused as invalid (or that could
                            not be encoded), with the reason; kept for a person, never replayed

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

import dataclasses
import fcntl
import json
import os
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, Final

from gateway.store.ids import new_id
from gateway.store.records import FeedbackRecord, InferenceRecord, ShadowRecord, utc_now

SpoolRecord = InferenceRecord | FeedbackRecord | ShadowRecord

_KINDS: Final = MappingProxyType(
    {"inference": InferenceRecord, "feedback": FeedbackRecord, "shadow": ShadowRecord}
)
_KIND_OF: Final = MappingProxyType({cls: kind for kind, cls in _KINDS.items()})
DEAD_LETTER_FILE: Final = "rejected.jsonl"
_SEGMENT_GLOB: Final = "segment-*.jsonl"


def encode_line(record: SpoolRecord) -> bytes:
    data = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    data["ts"] = record.ts.isoformat()
    line = json.dumps({"kind": _KIND_OF[type(record)], "record": data}, ensure_ascii=False)
    return line.encode() + b"\n"


def decode_line(line: bytes) -> SpoolRecord:
    """Parse one spool line; ``ValueError``/``TypeError``/``KeyError`` when it is not one."""
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
            except (TypeError, ValueError) as e:
                bad.append((record, f"cannot encode: {e}"))
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
            except (ValueError, TypeError, KeyError) as e:
                bad.append((line, f"unreadable spool line: {e!r}"))
        return SpoolClaim(path, records, bad, f)

    def dead_letter(self, entries: Sequence[tuple[Any, str]]) -> None:
        """Append (record or raw line, reason) pairs to ``rejected.jsonl``, fsync'd."""
        with self._lock:
            self._dead_letter_locked(entries)

    def _dead_letter_locked(self, entries: Sequence[tuple[Any, str]]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        at = utc_now().isoformat()
        lines = []
        for item, reason in entries:
            if isinstance(item, bytes):
                body: Any = {"line": item.decode(errors="replace")}
            else:
                body = {"kind": _KIND_OF.get(type(item)), "record": _plain(item)}
            body.update(error=reason, at=at)
            lines.append(json.dumps(body, ensure_ascii=False, default=repr) + "\n")
        with (self.directory / DEAD_LETTER_FILE).open("a", encoding="utf-8") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())

    def close(self) -> None:
        self.seal()


def _plain(record: object) -> Any:
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return record
