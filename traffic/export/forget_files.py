"""Exported dataset files that hold forgotten records: rewritten without them, or deleted.

Which folders: those the store's lineage links give as a dataset's location
(``model_dataset.location``: a checkpoint was trained on its files) and every folder with a
``manifest.json`` under the export roots given. A folder is touched only when its manifest's
lineage (:mod:`traffic.export.lineage`) lists a forgotten row; a manifest without a lineage
(written before lineage existed) cannot say, and is reported ``unknown`` when the store links
it (it is not read as clean).

- An exporter's dataset (``sft``, ``preference_*``, ``rl_prompts``: :class:`ExportManifest`) is
  built again in place from the rows its lineage names, less the forgotten ones, with the config
  it was built with (:func:`traffic.export.export.export_dataset`): its files and manifest,
  lineage included, no longer hold them. A preference pair one of whose rows is forgotten goes
  with it. Rows deleted since for another reason are not brought back.
- Any other dataset (episode exports, whose episodes a missing step breaks) has its data files
  and manifest deleted, and is reported ``deleted``.

The dataset rows of the store (``dataset``) keep their id sets: ids are not content, and they
are how the checkpoints trained on the originals are found.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from traffic.export.lineage import DatasetLineage
from traffic.export.lineage_store import stored_rows
from traffic.export.wire_formats import LegacyTranslator
from traffic.store import StoreBackend

MANIFEST = "manifest.json"


@dataclass(slots=True)
class ExportsForgotten:
    """Folders rewritten, deleted, and linked ones whose manifest could not say (``unknown``:
    reason by folder); ``rows``: forgotten rows the rewritten and deleted ones listed."""

    rewritten: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unknown: dict[str, str] = field(default_factory=dict)
    rows: int = 0


def export_folders(locations: Iterable[str], roots: Iterable[Path]) -> tuple[list[Path], set[Path]]:
    """The folders to look at (the linked ``locations`` and every manifest's under ``roots``),
    and the linked ones, resolved."""
    linked = {Path(p).resolve() for p in locations}
    found = set(linked)
    for root in roots:
        found.update(m.parent.resolve() for m in Path(root).rglob(MANIFEST))
    return sorted(found), linked


def _manifest(folder: Path) -> dict[str, Any] | None:
    try:
        document = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


async def forget_in_exports(
    store: StoreBackend,
    folders: Iterable[Path],
    forgotten: Collection[str],
    *,
    linked: Collection[Path] = (),
    legacy: LegacyTranslator | None = None,
) -> ExportsForgotten:
    """Rewrite or delete each of ``folders`` whose lineage lists a row of ``forgotten``;
    ``linked``: those the store names (reported ``unknown`` when their manifest cannot say)."""
    result = ExportsForgotten()
    wanted = set(forgotten)
    for folder in folders:
        document = _manifest(folder)
        if document is None or not isinstance(document.get("lineage"), dict):
            if folder in linked:
                result.unknown[str(folder)] = "no manifest with a lineage"
            continue
        try:
            lineage = DatasetLineage.model_validate(document["lineage"])
        except ValidationError:
            result.unknown[str(folder)] = "unreadable lineage"
            continue
        held = len(wanted.intersection(lineage.ids()))
        if not held:
            continue
        result.rows += held
        if await _rewrite(store, folder, document, lineage, wanted, legacy):
            result.rewritten.append(str(folder))
        else:
            _delete(folder, document)
            result.deleted.append(str(folder))
    return result


async def _rewrite(
    store: StoreBackend,
    folder: Path,
    document: dict[str, Any],
    lineage: DatasetLineage,
    forgotten: set[str],
    legacy: LegacyTranslator | None,
) -> bool:
    """Build an exporter's dataset again in ``folder`` without ``forgotten``; False when it is
    not one (or its rows carry no time)."""
    # Imported here: the exporter's pipeline is not part of the gateway's start-up (the admin
    # API's forget route imports this module; tests/gateway/test_startup.py).
    from traffic.export.export import ExportManifest, export_dataset

    try:
        manifest = ExportManifest.model_validate(document)
    except ValidationError:
        return False
    rows = await stored_rows(store, lineage, without=forgotten)
    if rows is None:
        return False
    config = manifest.config.model_copy(update={"out_dir": folder})
    await asyncio.to_thread(export_dataset, rows, config, legacy=legacy)
    return True


def _delete(folder: Path, document: dict[str, Any]) -> None:
    files = document.get("files")
    names = [str(n) for n in files] if isinstance(files, dict) else []
    for name in [*names, MANIFEST]:
        path = folder / name
        if path.resolve().parent == folder.resolve():  # never outside the folder
            path.unlink(missing_ok=True)
