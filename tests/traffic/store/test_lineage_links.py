"""Which datasets trained which checkpoint, on SQLite and PostgreSQL: links are added once, read
back both ways, and walk the registry's parent links."""

from __future__ import annotations

from traffic.store import DatasetRecord, ModelDatasetRecord, ModelVersionRecord, StoreBackend
from traffic.store.versions import descendants, version_chain


def _dataset(name: str, first: str, last: str) -> DatasetRecord:
    return DatasetRecord(
        id=name * 8,
        kind="sft",
        row_count=2,
        first_id=first,
        last_id=last,
        lineage={"kind": "sft", "ids": [first, last]},
        config={"kind": "sft"},
    )


A = _dataset("a", "0190a000-0000-7000-8000-000000000001", "0190a000-0000-7000-8000-000000000009")
B = _dataset("b", "0190b000-0000-7000-8000-000000000001", "0190b000-0000-7000-8000-000000000002")


def _link(version: str, dataset: DatasetRecord, location: str | None = None) -> ModelDatasetRecord:
    return ModelDatasetRecord(model_version_id=version, dataset_id=dataset.id, location=location)


async def test_a_checkpoints_datasets_are_linked_once_and_read_back_both_ways(
    store_backend: StoreBackend,
) -> None:
    store = store_backend
    await store.link_datasets([A, B], [_link("ck-1", A, "runs/sft"), _link("ck-1", B)])
    await store.link_datasets([A, B], [_link("ck-1", A, "runs/sft"), _link("ck-1", B)])
    await store.link_datasets([A], [_link("ck-2", A)])  # a dataset shared: stored once

    linked = await store.datasets_of(["ck-1"])
    assert [(x.dataset_id, x.location) for x, _ in linked] == [(A.id, "runs/sft"), (B.id, None)]
    assert [d for _, d in linked] == [A, B]  # lineage and config as written
    assert [x.model_version_id for x in await store.dataset_links([A.id])] == ["ck-1", "ck-2"]
    assert await store.dataset_links(["unknown"]) == []
    assert sorted(await store.dataset_bounds()) == [
        (A.id, A.first_id, A.last_id),
        (B.id, B.first_id, B.last_id),
    ]
    (light,) = await store.get_datasets([B.id], lineage=False)
    assert light.lineage == {} and light.row_count == 2


def test_the_registrys_parent_links_give_ancestors_and_descendants() -> None:
    def version(id_: str, parent: str | None) -> ModelVersionRecord:
        return ModelVersionRecord(id=id_, parent=parent, path=f"/ck/{id_}")

    versions = {
        v.id: v
        for v in (
            version("base", None),
            version("r1", "base"),
            version("r2", "r1"),
            version("fp8", "r2"),
            version("other", "base"),
        )
    }
    assert [v.id for v in version_chain(versions, "fp8")] == ["fp8", "r2", "r1", "base"]
    assert descendants(versions, ["r1"]) == {"fp8": "r1", "r2": "r1"}
    assert descendants(versions, ["r1", "r2"]) == {"fp8": "r2"}  # the nearest trained ancestor
