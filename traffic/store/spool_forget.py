"""Forgetting in the spool (:mod:`traffic.store.spool`): its segments and its dead letters.

A scope is :class:`SpoolScope`: key ids, inference ids, and optionally a rule on an inference
record (``expires``: the retention pass's windows). :func:`scope_ids` reads every
segment and dead letter (no lock: a read) for the inferences of those keys;
:func:`forget_in_spool` then rewrites each file without the records of those inferences (the
inferences, their feedback and shadow answers):

- a segment is claimed as the replayer claims one (an exclusive ``flock`` without waiting), its
  kept lines written to a temporary file, fsync'd, and renamed over it (removed when nothing is
  kept); a segment another process holds (the one a gateway is appending to, one being replayed)
  is reported ``busy``, to try again once sealed or replayed;
- ``rejected.jsonl`` is rewritten the same way under its lock
  (:func:`~traffic.store.spool.locked_dead_letters`), which appends take too.

A line that is not a readable record (a torn line, a sketched dead letter) goes when it names a
forgotten inference id or a key of the scope anywhere in its text: a dead letter is kept for a
person, and one that may hold the scope's content is not kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from traffic.store.ids import new_id
from traffic.store.records import InferenceRecord
from traffic.store.spool import (
    DEAD_LETTER_FILE,
    SpoolRecord,
    decode_line,
    locked_dead_letters,
)

_SEGMENT_GLOB: Final = "segment-*.jsonl"
_UUID: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(slots=True)
class SpoolScope:
    """What to forget: inferences made with ``key_ids``, among ``inference_ids`` or that
    ``expires`` holds (the set grows as :func:`scope_ids` finds the spool's), and everything
    pointing at them."""

    key_ids: frozenset[str] = frozenset()
    inference_ids: set[str] = field(default_factory=set)
    expires: Callable[[InferenceRecord], bool] | None = None

    def holds(self, record: SpoolRecord) -> bool:
        if isinstance(record, InferenceRecord):
            return (
                record.id in self.inference_ids
                or record.api_key_id in self.key_ids
                or (self.expires is not None and self.expires(record))
            )
        return record.inference_id in self.inference_ids

    def named_in(self, text: str) -> bool:
        """Whether unreadable ``text`` names a forgotten inference or a key of the scope."""
        if any(i in self.inference_ids for i in _UUID.findall(text.lower())):
            return True
        # A key as JSON, as a repr (a sketch), or as JSON inside a JSON string (a dead letter's
        # copy of a torn spool line).
        spellings = (
            (json.dumps(k), repr(k), json.dumps(json.dumps(k))[1:-1]) for k in self.key_ids
        )
        return any(s in text for forms in spellings for s in forms)


@dataclass(slots=True)
class SpoolForgotten:
    """What a pass removed: records by kind (``inference``, ``feedback``, ``shadow``,
    ``unreadable``), dead letters, and the segments it could not claim."""

    segments: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    busy: list[str] = field(default_factory=list)


def _read(line: bytes) -> SpoolRecord | None:
    try:
        return decode_line(line)
    except Exception:  # torn, not a record: judged by its text
        return None


def _dead_letter_record(line: bytes) -> SpoolRecord | None:
    """The record a dead letter holds faithfully (or the spool line it keeps), if any."""
    try:
        entry: Any = json.loads(line)
        if isinstance(entry.get("line"), str):
            return _read(entry["line"].encode())
        if isinstance(entry.get("record"), dict) and entry.get("kind"):
            return _read(json.dumps({"kind": entry["kind"], "record": entry["record"]}).encode())
    except Exception:  # not JSON, not an object, a record that does not decode
        return None
    return None


def _lines(path: Path) -> list[bytes]:
    try:
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


def scope_ids(directory: Path, scope: SpoolScope) -> set[str]:
    """Add to ``scope.inference_ids`` the spooled and dead-lettered inferences of its keys;
    returns those found (a read: nothing changes)."""
    found: set[str] = set()
    paths = [*sorted(directory.glob(_SEGMENT_GLOB)), directory / DEAD_LETTER_FILE]
    for path in paths if directory.is_dir() else []:
        dead = path.name == DEAD_LETTER_FILE
        for line in _lines(path):
            record = _dead_letter_record(line) if dead else _read(line)
            if isinstance(record, InferenceRecord) and scope.holds(record):
                found.add(record.id)
    scope.inference_ids |= found
    return found


def _forgets(line: bytes, scope: SpoolScope, *, dead: bool) -> str | None:
    """The kind of record ``line`` is when the scope forgets it; None: kept."""
    record = _dead_letter_record(line) if dead else _read(line)
    if record is not None:
        return type(record).__name__.removesuffix("Record").lower() if scope.holds(record) else None
    return "unreadable" if scope.named_in(line.decode("utf-8", "replace")) else None


def _replace(path: Path, kept: Iterable[bytes]) -> None:
    """``path`` rewritten with ``kept`` (removed when empty): a new file renamed into place."""
    lines = list(kept)
    if not lines:
        path.unlink(missing_ok=True)
        return
    tmp = path.with_name(f".forget-{new_id()}.tmp")
    with tmp.open("wb") as f:
        f.writelines(line + b"\n" for line in lines)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def forget_in_spool(directory: Path, scope: SpoolScope) -> SpoolForgotten:
    """Rewrite the segments and dead letters of ``directory`` without ``scope``'s records."""
    result = SpoolForgotten()
    if not directory.is_dir():
        return result
    for path in sorted(directory.glob(_SEGMENT_GLOB)):
        try:
            f = path.open("rb")
        except FileNotFoundError:
            continue  # replayed meanwhile
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                result.busy.append(path.name)
                continue
            if os.fstat(f.fileno()).st_nlink == 0:
                continue
            kept = _filter(f.read().splitlines(), scope, result.segments, dead=False)
            if kept is not None:
                _replace(path, kept)
    with contextlib.suppress(FileNotFoundError), locked_dead_letters(directory, "r+b") as d:
        removed: dict[str, int] = {}
        kept = _filter(d.read().splitlines(), scope, removed, dead=True)
        if kept is not None:
            _replace(directory / DEAD_LETTER_FILE, kept)
        result.dead_letters = sum(removed.values())
    return result


def _filter(
    lines: list[bytes], scope: SpoolScope, counts: dict[str, int], *, dead: bool
) -> list[bytes] | None:
    """The lines kept, counting the others by kind; None when every line is kept."""
    kept: list[bytes] = []
    for line in lines:
        if not line.strip():
            continue
        kind = _forgets(line, scope, dead=dead)
        if kind is None:
            kept.append(line)
        else:
            counts[kind] = counts.get(kind, 0) + 1
    return kept if len(kept) < len([x for x in lines if x.strip()]) else None
