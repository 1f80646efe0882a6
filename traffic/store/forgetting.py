"""The store's side of forgetting: find a scope's rows, delete them, mark checkpoints tainted.

- :func:`scope_rows`: the inferences a scope names (by key, or by id), with their episodes;
- :func:`delete_rows`: those inferences deleted with their feedback and shadow answers, in
  chunks of ``CHUNK`` ids, one statement per table a chunk, feedback and shadows first (a
  crash midway leaves inferences without feedback, never feedback whose inference is gone; a
  forget run again finishes it);
- :func:`add_taints` and :func:`taints`: the ``model_taint`` table (migration 11), only ever
  added to; :func:`tainted_by` answers for a checkpoint and its recorded ancestors (a
  checkpoint trained from a tainted one after the forget learned from it too).

The orchestration (spool, dead letters, exported files, the audit entry) is
:mod:`traffic.forget`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from traffic.store.backend import StoreBackend
from traffic.store.console_queries import sql_store
from traffic.store.ids import min_id_at
from traffic.store.queries import decode_row, in_ids, in_keys, select_list
from traffic.store.records import utc_now
from traffic.store.schema import MODEL_TAINT
from traffic.store.versions import version_chain

CHUNK: Final = 500  # ids a statement (SQLite's bound parameters: 32,766 at most)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaintRecord:
    """Checkpoint ``model_version_id`` learned from a record forgotten by ``forget_id`` (a
    change log entry): trained on it (``via`` "trained") or descended from a checkpoint that
    was (``via`` that ancestor's id)."""

    model_version_id: str
    forget_id: str
    ts: datetime = field(default_factory=utc_now)
    via: str = "trained"


async def scope_rows(
    store: StoreBackend,
    *,
    key_ids: Sequence[str] = (),
    inference_ids: Sequence[str] = (),
    before: datetime | None = None,
) -> dict[str, str | None]:
    """The stored inferences made with one of ``key_ids``, among ``inference_ids`` or recorded
    before ``before``: id -> its episode id (None when in no episode)."""
    s = sql_store(store)
    found: dict[str, str | None] = {}
    if before is not None:  # on the id index (its time prefix), no row decoded
        bound = s.codec.encode_id(min_id_at(before))
        rows = await s._fetch(
            f"SELECT id, episode_id FROM inference WHERE id < {s.codec.param}", [bound]
        )
        found.update((str(r[0]), r[1]) for r in rows)
    for column, values, condition in (
        ("api_key_id", key_ids, in_keys),
        ("id", inference_ids, in_ids),
    ):
        for start in range(0, len(values), CHUNK):
            where, params = condition(column, list(values[start : start + CHUNK]), s.codec)
            rows = await s._fetch(f"SELECT id, episode_id FROM inference WHERE {where}", params)
            found.update((str(r[0]), r[1]) for r in rows)
    return found


async def delete_rows(store: StoreBackend, inference_ids: Sequence[str]) -> dict[str, int]:
    """Delete the inferences ``inference_ids`` with their feedback and shadow answers (those
    stored, whether their inference is or not); how many rows of each were deleted."""
    s = sql_store(store)
    counts = {"inferences": 0, "feedback": 0, "shadows": 0}
    ids = sorted(set(inference_ids))
    for start in range(0, len(ids), CHUNK):
        chunk = ids[start : start + CHUNK]
        for table, column, name in (
            ("feedback", "inference_id", "feedback"),
            ("shadow", "inference_id", "shadows"),
            ("inference", "id", "inferences"),
        ):
            where, params = in_ids(column, chunk, s.codec)
            rows = await s._fetch(
                f"DELETE FROM {table} WHERE {where} RETURNING id", params, write=True
            )
            counts[name] += len(rows)
    return counts


async def add_taints(store: StoreBackend, records: Sequence[TaintRecord]) -> None:
    """Mark checkpoints tainted (a taint already recorded stays as it was)."""
    if records:
        await sql_store(store)._insert(MODEL_TAINT, records)


async def taints(store: StoreBackend, version_ids: Sequence[str] = ()) -> list[TaintRecord]:
    """The taints of ``version_ids`` (every taint when empty), oldest first."""
    s = sql_store(store)
    where, params = (
        in_keys("model_version_id", version_ids, s.codec) if version_ids else ("1 = 1", [])
    )
    rows = await s._fetch(
        f"SELECT {select_list(MODEL_TAINT)} FROM model_taint WHERE {where}"
        " ORDER BY ts, model_version_id",
        params,
    )
    return [decode_row(TaintRecord, MODEL_TAINT, r, s.codec) for r in rows]


async def tainted_by(
    store: StoreBackend, version_id: str, *, parent: str | None = None
) -> list[TaintRecord]:
    """The taints of ``version_id`` and of its recorded ancestors (from ``parent`` when it is
    not recorded itself yet): empty when it learned from no forgotten record (as far as the
    lineage knows)."""
    versions = {v.id: v for v in await store.list_model_versions()}
    chain = [v.id for v in version_chain(versions, version_id)]
    if not chain:
        chain = [version_id, *(v.id for v in version_chain(versions, parent or ""))]
    return await taints(store, chain)
