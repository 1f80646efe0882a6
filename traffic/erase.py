"""Records erased everywhere they were kept: the steps forgetting and retention share.

Given the inferences to erase (ids, found in the store and the spool by the caller's rule),
:func:`find_in_spool` first adds the spool's own (its segments and dead letters hold records
not in the store yet), then :func:`erase`, in this order:

1. rewrites (or deletes) the exported dataset files that list one of them
   (:mod:`traffic.export.forget_files`): those the lineage links (``uses``, which the caller
   reads first: :func:`traffic.export.lineage_store.records_uses`) and those under
   ``export_roots``;
2. removes them, their feedback and their shadow answers from the spool's segments and dead
   letters (:mod:`traffic.store.spool_forget`; segments another process holds are tried again
   ``busy_tries`` times, then reported ``busy``);
3. deletes them from the store with their feedback and shadow answers: ``delete``, by default
   :func:`traffic.store.forgetting.delete_rows` (the retention pass drops or rebuilds a day's
   partitions instead where it can).

Each step is idempotent: run again, it finds only what is left. Who calls it writes the audit
entry, and does what else its rule asks first (a forget taints the checkpoints trained on the
records: :mod:`traffic.forget`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from traffic.export.forget_files import ExportsForgotten, export_folders, forget_in_exports
from traffic.export.lineage_store import RecordsUses
from traffic.export.wire_formats import LegacyTranslator
from traffic.store import StoreBackend
from traffic.store.forgetting import delete_rows
from traffic.store.spool_forget import SpoolForgotten, SpoolScope, forget_in_spool, scope_ids


@dataclass(slots=True)
class Erased:
    """What :func:`erase` removed: store rows by table, spool records, export folders."""

    database: dict[str, int] = field(default_factory=dict)
    spool: SpoolForgotten = field(default_factory=SpoolForgotten)
    exports: ExportsForgotten = field(default_factory=ExportsForgotten)


async def find_in_spool(spool_dirs: Sequence[Path], scope: SpoolScope) -> set[str]:
    """Add the spooled and dead-lettered inferences ``scope`` holds to it; its ids now."""
    for directory in spool_dirs:
        await asyncio.to_thread(scope_ids, directory, scope)
    return set(scope.inference_ids)


async def erase(
    store: StoreBackend,
    ids: Collection[str],
    scope: SpoolScope,
    uses: RecordsUses,
    *,
    spool_dirs: Sequence[Path] = (),
    export_roots: Sequence[Path] = (),
    legacy: LegacyTranslator | None = None,
    busy_tries: int = 20,
    busy_wait_s: float = 0.25,
    delete: Callable[[], Awaitable[dict[str, int]]] | None = None,
) -> Erased:
    """Erase ``ids`` (and what ``scope`` holds in the spool) everywhere (module docstring)."""
    locations = [p for _, _, where in uses.datasets for p in where]
    folders, linked = await asyncio.to_thread(export_folders, locations, export_roots)
    exports = await forget_in_exports(store, folders, ids, linked=linked, legacy=legacy)

    spool = SpoolForgotten()
    for directory in spool_dirs:
        done = await _spool_pass(directory, scope, busy_tries, busy_wait_s)
        for kind, n in done.segments.items():
            spool.segments[kind] = spool.segments.get(kind, 0) + n
        spool.dead_letters += done.dead_letters
        spool.busy += [str(directory / name) for name in done.busy]

    database = await (delete() if delete is not None else delete_rows(store, sorted(ids)))
    return Erased(database, spool, exports)


async def _spool_pass(
    directory: Path, scope: SpoolScope, tries: int, wait_s: float
) -> SpoolForgotten:
    """The spool rewritten, segments another process holds tried again up to ``tries`` times."""
    total = SpoolForgotten()
    for attempt in range(max(tries, 1)):
        done = await asyncio.to_thread(forget_in_spool, directory, scope)
        for kind, n in done.segments.items():
            total.segments[kind] = total.segments.get(kind, 0) + n
        total.dead_letters += done.dead_letters
        total.busy = done.busy
        if not done.busy or attempt == tries - 1:
            break
        await asyncio.sleep(wait_s)
    return total
