"""The model registry's versions as a graph: each ``model_version`` row names its ``parent``.

A checkpoint trained from another one (a later round, an fp8 export, a candidate trained further)
learned from its ancestors' data as well as from its own datasets
(:meth:`~traffic.store.backend.StoreBackend.datasets_of`): lineage walks these links both ways.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from traffic.store.records import ModelVersionRecord


def version_chain(
    versions: Mapping[str, ModelVersionRecord], version_id: str
) -> list[ModelVersionRecord]:
    """``version_id`` and its recorded ancestors, newest first (stops at an unrecorded parent)."""
    chain: list[ModelVersionRecord] = []
    current: str | None = version_id
    while current is not None and current in versions and len(chain) < len(versions):
        chain.append(versions[current])
        current = versions[current].parent
    return chain


def descendants(
    versions: Mapping[str, ModelVersionRecord], roots: Collection[str]
) -> dict[str, str]:
    """Every recorded descendant of ``roots`` that is not a root itself, with the root it
    descends from (the nearest, walking up its parents)."""
    found: dict[str, str] = {}
    for version_id in versions:
        if version_id in roots:
            continue
        for ancestor in version_chain(versions, version_id)[1:]:
            if ancestor.id in roots:
                found[version_id] = ancestor.id
                break
    return dict(sorted(found.items()))
