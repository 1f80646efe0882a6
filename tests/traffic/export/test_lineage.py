"""A dataset names the recorded rows it was built from (compactly) and hashes what it holds: the
manifest round-trips, its hash follows every record's text, and the rows it names rebuild it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_episodes import _episodes
from traffic.client_labels import label_row
from traffic.export import DatasetConfig, ExportConfig, SplitConfig, build_dataset, export_dataset
from traffic.export.episode_export import EpisodeExportConfig, build_episode_dataset
from traffic.export.export import ExportManifest
from traffic.export.id_sets import IdSet
from traffic.export.lineage import DatasetRef, dataset_record, lineage_of
from traffic.export.lineage_store import rebuild_matches
from traffic.store import InferenceRow, SqliteBackend
from traffic.store.ids import new_id

SFT = DatasetConfig(kind="sft", split=SplitConfig(eval_fraction=0.25))


def _rows() -> list[InferenceRow]:
    accepted = [
        syn.chat_row(i, f"question {i}", f"answer {i}", fb=[syn.feedback("accepted", i)])
        for i in range(8)
    ]
    rejected = syn.chat_row(20, "question x", "wrong", fb=[syn.feedback("rejected", 20)])
    unlabelled = syn.chat_row(21, "question y", "maybe")
    return [*accepted, rejected, unlabelled]


def _stamped(row: InferenceRow, use: str) -> InferenceRow:
    return dataclasses.replace(row, inference=dataclasses.replace(row.inference, training_use=use))


def test_an_id_set_round_trips_in_about_fifteen_characters_an_id() -> None:
    ids = [new_id() for _ in range(2000)]
    encoded = IdSet.model_validate_json(IdSet.of([*ids, *ids[:10]]).model_dump_json())
    assert encoded.ids() == sorted(ids) and encoded.count == 2000
    assert encoded.encoding == "uuid7-delta" and len(encoded.data) < 16 * len(ids)  # 37 as text
    assert encoded.first == min(ids) and encoded.last == max(ids)
    assert encoded.holds(ids[7]) and not encoded.holds(new_id())
    other = IdSet.of(["r-2", "r-1"])  # not UUIDs: kept as text
    assert other.encoding == "text" and other.ids() == ["r-1", "r-2"] and other.holds("r-2")


def test_an_id_set_that_does_not_match_its_hash_is_refused() -> None:
    genuine = IdSet.of([new_id() for _ in range(5)])
    forged = genuine.model_copy(update={"data": IdSet.of([new_id() for _ in range(5)]).data})
    with pytest.raises(ValueError, match="sha256"):
        forged.ids()
    with pytest.raises(ValueError, match="decode"):
        genuine.model_copy(update={"data": "not base64!"}).ids()


def test_the_lineage_names_exactly_the_rows_whose_records_are_in_each_split() -> None:
    rows = _rows()
    dataset = build_dataset(rows, SFT)
    lineage = dataset.lineage
    used = [r.inference.id for r in rows[:8]]  # rejected and unlabelled rows give no record
    assert lineage.ids() == sorted(used) and lineage.row_count == 8
    assert lineage.train.count == len(dataset.train) and lineage.eval.count == len(dataset.eval)
    assert lineage.part_of(used[0]) == "train" and lineage.part_of(used[-1]) == "eval"
    assert lineage.part_of(rows[8].inference.id) is None and lineage.consistent()


def test_a_withheld_row_is_not_in_the_lineage() -> None:
    rows = _rows()
    rows[3] = _stamped(rows[3], "deny")
    lineage = build_dataset(rows, SFT).lineage
    assert lineage.part_of(rows[3].inference.id) is None and lineage.row_count == 7


def test_the_manifest_carries_the_lineage_and_reads_back(tmp_path: Path) -> None:
    config = ExportConfig(kind="sft", out_dir=tmp_path / "sft", split=SplitConfig())
    manifest = export_dataset(_rows(), config)
    read = ExportManifest.model_validate_json((tmp_path / "sft" / "manifest.json").read_text())
    assert read.lineage == manifest.lineage == build_dataset(_rows(), config).lineage
    ref = DatasetRef(lineage=read.lineage, config=config.model_dump(mode="json"))
    assert lineage_of(dataset_record(ref)) == read.lineage


def test_the_hash_changes_when_a_record_does_and_only_then() -> None:
    rows = _rows()
    before = build_dataset(rows, SFT).lineage
    assert build_dataset(list(reversed(rows)), SFT).lineage == before  # input order is no change
    edited = rows[:]
    edited[2] = syn.chat_row(2, "question 2", "answer 2, edited", fb=[syn.feedback("accepted", 2)])
    after = build_dataset(edited, SFT).lineage
    assert after.ids() == before.ids()  # the same rows ...
    assert after.records_sha256 != before.records_sha256  # ... with other text
    assert after.sha256 != before.sha256
    fewer = build_dataset(rows[1:], SFT).lineage
    assert fewer.sha256 != before.sha256 and fewer.row_count == 7


def test_an_episode_record_lists_every_step(tmp_path: Path) -> None:
    config = EpisodeExportConfig(
        kind="episode_sft", out_dir=tmp_path, split=SplitConfig(eval_fraction=0)
    )
    episodes = _episodes()
    dataset = build_episode_dataset(episodes, config)
    steps = [s.record.id for e in episodes[:2] for s in e.steps]  # the two accepted clean ones
    assert dataset.lineage.ids() == sorted(steps) and dataset.lineage.eval.count == 0


async def test_the_rows_a_lineage_names_rebuild_the_same_dataset(tmp_path: Path) -> None:
    rows = _rows()
    dataset = build_dataset(rows, SFT)
    record = dataset_record(DatasetRef(lineage=dataset.lineage, config=SFT.model_dump(mode="json")))
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await store.insert_inferences([r.inference for r in rows])
        await store.insert_feedback([f for r in rows for f in r.feedback])
        rebuilt = await rebuild_matches(store, record)
        assert rebuilt is not None and rebuilt.matches and rebuilt.missing == 0
        other = syn.chat_row(3.5, "between", "answer", fb=[syn.feedback("accepted", 3.5)])
        await store.insert_inferences([other.inference])  # a row it never used: ignored
        assert (await rebuild_matches(store, record)) == rebuilt
    finally:
        await store.close()


async def test_a_dataset_built_with_client_labels_rebuilds_only_with_them(tmp_path: Path) -> None:
    """The RL loop joins client-side labels to the rows it reads (a flywheel run's labels.json):
    its RL-prompt records carry them, so the rows alone rebuild another dataset."""
    rows = _rows()
    labels = {r.inference.id: {"family": "f", "task_id": str(i)} for i, r in enumerate(rows)}
    config = DatasetConfig(kind="rl_prompts", split=SplitConfig(eval_fraction=0.25))
    dataset = build_dataset([label_row(r, labels) for r in rows], config)
    record = dataset_record(
        DatasetRef(lineage=dataset.lineage, config=config.model_dump(mode="json"))
    )
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        await store.insert_inferences([r.inference for r in rows])
        await store.insert_feedback([f for r in rows for f in r.feedback])
        alone = await rebuild_matches(store, record)
        assert alone is not None and not alone.matches and alone.missing == 0
        joined = await rebuild_matches(store, record, labels=labels)
        assert joined is not None and joined.matches
    finally:
        await store.close()
