"""A set of record ids, compact and self-contained: what a dataset's lineage lists.

Encoding ``uuid7-delta`` (every id a canonical UUID, as the store's are): the ids sorted (as
128-bit integers, which is also their text order), each written as the varint of its 48-bit
millisecond timestamp minus the previous id's, then its 80 low bits as they are (10 bytes);
the whole zlib-compressed and base64-encoded. About 11 bytes an id (15 characters) against 37 as
text: UUIDv7 ids are time-ordered, so their timestamps cost a byte or two, and their 74 random
bits (9.25 bytes) are a floor no encoding goes below. Other ids (fixtures, imports) use ``text``:
the sorted ids, a line each, zlib, base64.

Why not ranges ("every stored row from a to b")? Smaller where a dataset takes every row of a
stretch, but a range means something only while the store holds exactly the rows it held when
the dataset was built: forgetting deletes inside ranges, a spool replayed late inserts old ids
into them, and some datasets are built from rows that are in no store
(``rl_loop.feedback_pairs``). A lineage must still answer "did this dataset use record X?"
after X is deleted; these sets answer exactly, on their own.

``sha256`` is the SHA-256 of the sorted ids as text, one per line (``\\n`` after each): the set's
identity whatever the encoding; decoding checks it. ``first`` and ``last`` bound the set, so a
lookup skips sets that cannot hold an id without decoding them.
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import uuid
import zlib
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

IdEncoding = Literal["uuid7-delta", "text"]

_LOW_BITS = 80
_LOW_MASK = (1 << _LOW_BITS) - 1
_LOW_BYTES = _LOW_BITS // 8


class IdSet(BaseModel):
    """Distinct ids, encoded as the module docstring says; :meth:`of` makes one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = Field(ge=0)
    first: str | None = None
    last: str | None = None
    sha256: str
    encoding: IdEncoding
    data: str

    @classmethod
    def of(cls, ids: Iterable[str]) -> IdSet:
        ordered = sorted(set(ids))
        values = _uuid_values(ordered)
        if values is None:
            encoding: IdEncoding = "text"
            payload = "".join(f"{i}\n" for i in ordered).encode()
        else:
            encoding, payload = "uuid7-delta", _pack(values)
        return cls(
            count=len(ordered),
            first=ordered[0] if ordered else None,
            last=ordered[-1] if ordered else None,
            sha256=ids_sha256(ordered),
            encoding=encoding,
            data=base64.b64encode(zlib.compress(payload, 9)).decode("ascii"),
        )

    def ids(self) -> list[str]:
        """The ids, sorted; ``ValueError`` when the data does not decode to ``sha256``."""
        try:
            payload = zlib.decompress(base64.b64decode(self.data, validate=True))
        except (ValueError, zlib.error) as exc:
            raise ValueError(f"id set does not decode: {exc}") from exc
        try:
            if self.encoding == "text":
                ordered = payload.decode().splitlines()
            else:
                ordered = [str(uuid.UUID(int=v)) for v in _unpack(payload)]
        except (IndexError, UnicodeDecodeError) as exc:
            raise ValueError(f"id set does not decode: {exc}") from exc
        if len(ordered) != self.count or ids_sha256(ordered) != self.sha256:
            raise ValueError("id set does not match its count and sha256")
        return ordered

    def may_hold(self, id_: str) -> bool:
        """False when ``id_`` is outside the set's bounds (no decoding)."""
        return self.first is not None and self.last is not None and self.first <= id_ <= self.last

    def holds(self, id_: str) -> bool:
        """Whether ``id_`` is in the set."""
        if not self.may_hold(id_):
            return False
        ordered = self.ids()
        at = bisect.bisect_left(ordered, id_)
        return at < len(ordered) and ordered[at] == id_


def ids_sha256(ordered: Iterable[str]) -> str:
    """SHA-256 of sorted ids, each followed by a newline."""
    digest = hashlib.sha256()
    for id_ in ordered:
        digest.update(f"{id_}\n".encode())
    return digest.hexdigest()


def _uuid_values(ordered: list[str]) -> list[int] | None:
    """The ids as integers, or None when one is not a canonical (lowercase) UUID."""
    values: list[int] = []
    for id_ in ordered:
        try:
            parsed = uuid.UUID(id_)
        except ValueError:
            return None
        if str(parsed) != id_:
            return None
        values.append(parsed.int)
    return values


def _pack(values: list[int]) -> bytes:
    out = bytearray()
    previous = 0
    for value in values:
        ms = value >> _LOW_BITS
        _varint(ms - previous, out)
        out += (value & _LOW_MASK).to_bytes(_LOW_BYTES, "big")
        previous = ms
    return bytes(out)


def _unpack(payload: bytes) -> list[int]:
    values: list[int] = []
    at, ms = 0, 0
    while at < len(payload):
        delta, shift = 0, 0
        while True:
            byte = payload[at]
            at += 1
            delta |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        ms += delta
        low = int.from_bytes(payload[at : at + _LOW_BYTES], "big")
        at += _LOW_BYTES
        values.append(ms << _LOW_BITS | low)
    return values


def _varint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
