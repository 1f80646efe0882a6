"""Forgetting: a key's, a team's, one record's or a time's traffic deleted everywhere it was kept.

:func:`forget` takes a :class:`ForgetScope` and, in this order:

1. finds the scope's inferences: in the store (by key, by id, or recorded before a time: the
   time in the record's id) and in the spool's segments
   and dead letters (:mod:`traffic.store.spool_forget`); a team's scope is its keys';
2. marks tainted every checkpoint trained on a dataset that lists one of them, and every
   recorded descendant of one (``model_taint``: :mod:`traffic.store.forgetting`); the lineage
   keeps ids apart from rows, so this is found before and after the rows are gone;
3. rewrites (or deletes) the exported dataset files that list one of them
   (:mod:`traffic.export.forget_files`): those the lineage links and those under
   ``export_roots``;
4. removes them from the spool (segments held by a running writer are retried ``busy_tries``
   times, then reported ``busy``: forget again once they are replayed);
5. deletes them from the store with their feedback and shadow answers;
6. appends the audit entry to the change log (action ``traffic.forget``, subject the scope):
   who, when, and how many rows of each kind went from where. It names ids, paths and counts,
   never content; its id is the taints' ``forget_id``.

Steps 3 to 5 are :func:`traffic.erase.erase`, which the retention pass shares
(:mod:`traffic.retention`). Run again, a forget finds what it missed (a segment busy then, a
record still in a gateway's memory then) and changes nothing else: every step is idempotent.
Revoke a key before forgetting it, or its next requests are recorded again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, model_validator

from traffic.erase import erase, find_in_spool
from traffic.export.forget_files import ExportsForgotten
from traffic.export.lineage_store import records_uses
from traffic.export.wire_formats import LegacyTranslator
from traffic.store import StoreBackend, new_id
from traffic.store.console_queries import record_change
from traffic.store.forgetting import TaintRecord, add_taints, scope_rows
from traffic.store.ids import is_uuid
from traffic.store.records import ChangeRecord
from traffic.store.spool_forget import SpoolForgotten, SpoolScope

FORGET_ACTION = "traffic.forget"


class ForgetScope(BaseModel):
    """What to forget: exactly one of a key's traffic, a team's keys' traffic, one record, or
    everything recorded before a time (timezone-aware)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key_id: str | None = None
    team_id: str | None = None
    inference_id: str | None = None
    before: AwareDatetime | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ForgetScope:
        given = [v for v in (self.key_id, self.team_id, self.inference_id, self.before) if v]
        if len(given) != 1:
            raise ValueError("name exactly one of key_id, team_id, inference_id, before")
        if self.inference_id is not None and not is_uuid(self.inference_id):
            raise ValueError(f"inference_id {self.inference_id!r} is not a record id")
        return self

    @property
    def subject(self) -> str:
        """The change log's subject: ``key:ID``, ``team:ID``, ``inference:ID`` or
        ``before:ISO-TIME``."""
        if self.key_id:
            return f"key:{self.key_id}"
        if self.team_id:
            return f"team:{self.team_id}"
        if self.before is not None:
            return f"before:{self.before.isoformat()}"
        return f"inference:{self.inference_id}"


@dataclass(slots=True)
class ForgetReport:
    """What one forget did (the audit entry's detail, plus its id)."""

    forget_id: str
    subject: str
    keys: list[str]
    database: dict[str, int]
    episodes: int
    spool: SpoolForgotten
    exports: ExportsForgotten
    tainted: dict[str, str] = field(default_factory=dict)  # checkpoint -> "trained" | ancestor

    def detail(self) -> dict[str, Any]:
        """The audit entry: ids, paths and counts, no content."""
        return {
            "keys": self.keys,
            "database": self.database,
            "episodes": self.episodes,
            "spool": {
                "segments": self.spool.segments,
                "dead_letters": self.spool.dead_letters,
                "busy": self.spool.busy,
            },
            "exports": asdict(self.exports),
            "tainted": self.tainted,
        }


async def _keys(store: StoreBackend, scope: ForgetScope) -> list[str]:
    if scope.key_id:
        return [scope.key_id]
    if scope.team_id:
        return sorted(k.id for k in await store.list_api_keys() if k.team_id == scope.team_id)
    return []


async def forget(
    store: StoreBackend,
    scope: ForgetScope,
    *,
    actor: str,
    spool_dirs: Sequence[Path] = (),
    export_roots: Sequence[Path] = (),
    legacy: LegacyTranslator | None = None,
    busy_tries: int = 20,
    busy_wait_s: float = 0.25,
) -> ForgetReport:
    """Forget ``scope`` everywhere (module docstring); the audit entry is written last."""
    keys = await _keys(store, scope)
    named = [scope.inference_id] if scope.inference_id else []
    stored = await scope_rows(store, key_ids=keys, inference_ids=named, before=scope.before)
    before = scope.before
    expires = None if before is None else (lambda record: record.ts < before)
    spool_scope = SpoolScope(frozenset(keys), set(stored) | set(named), expires)
    ids = await find_in_spool(spool_dirs, spool_scope)

    forget_id = new_id()
    uses = await records_uses(store, ids)
    tainted = {c: "trained" for c in uses.trained} | dict(uses.inherited)
    await add_taints(
        store,
        [TaintRecord(model_version_id=c, forget_id=forget_id, via=v) for c, v in tainted.items()],
    )
    erased = await erase(
        store,
        ids,
        spool_scope,
        uses,
        spool_dirs=spool_dirs,
        export_roots=export_roots,
        legacy=legacy,
        busy_tries=busy_tries,
        busy_wait_s=busy_wait_s,
    )
    episodes = {e for e in stored.values() if e}
    report = ForgetReport(
        forget_id,
        scope.subject,
        keys,
        erased.database,
        len(episodes),
        erased.spool,
        erased.exports,
        tainted,
    )
    await record_change(
        store,
        ChangeRecord(
            id=forget_id,
            actor=actor,
            action=FORGET_ACTION,
            subject=scope.subject,
            detail=report.detail(),
        ),
    )
    return report
