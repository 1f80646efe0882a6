"""`switchyard traffic lineage` on a real store: a checkpoint's records (its datasets rebuilt from
them to the same hash; SQLite and PostgreSQL), and the datasets and checkpoints a record reached,
also once the record is deleted (SQLite)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from gateway.cli import main as cli_main
from tests.traffic.export import synthetic as syn
from traffic.export import DatasetConfig, SplitConfig, build_dataset
from traffic.export.lineage import DatasetLineage, DatasetRef, dataset_record, link_record
from traffic.store import ModelVersionRecord, StoreConfig, open_store

SFT = DatasetConfig(kind="sft", split=SplitConfig(eval_fraction=0.25))
PROMPTS = DatasetConfig(kind="rl_prompts", split=SplitConfig(eval_fraction=0.25))


async def _recorded(url: str) -> tuple[DatasetLineage, DatasetLineage, str]:
    """Rows in the store; checkpoint ``sft-1`` (parent ``base``, child ``fp8-1``) trained on
    their SFT and RL-prompt datasets. Returns both lineages and a row neither used."""
    rows = [
        syn.chat_row(i, f"question {i}", f"answer {i}", fb=[syn.feedback("accepted", i)])
        for i in range(6)
    ]
    failed = syn.chat_row(9, "question 9", None, status=500)
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        await store.insert_inferences([r.inference for r in [*rows, failed]])
        await store.insert_feedback([f for r in rows for f in r.feedback])
        refs = [
            DatasetRef(lineage=build_dataset(rows, c).lineage, config=c.model_dump(mode="json"))
            for c in (SFT, PROMPTS)
        ]
        for version, parent in (("base", None), ("sft-1", "base"), ("fp8-1", "sft-1")):
            path = f"/ck/{version}"
            await store.upsert_model_version(
                ModelVersionRecord(id=version, parent=parent, path=path)
            )
        await store.link_datasets(
            [dataset_record(r) for r in refs], [link_record("sft-1", r) for r in refs]
        )
    finally:
        await store.close()
    return refs[0].lineage, refs[1].lineage, failed.inference.id


def _lineage(url: str, *args: str) -> int:
    return cli_main(["traffic", "lineage", "--store", url, *args])


def test_a_checkpoints_records_are_listed_and_rebuild_its_datasets(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = store_url
    sft, prompts, unused = asyncio.run(_recorded(url))

    assert _lineage(url, "--checkpoint", "sft-1", "--verify") == 0
    out, err = capsys.readouterr()
    assert out.split() == sorted({*sft.ids(), *prompts.ids()}) and unused not in out
    assert "checkpoint sft-1 (candidate): 2 datasets, 6 records" in err
    assert err.count("rebuilt from the store: same hash") == 2

    assert _lineage(url, "--checkpoint", "fp8-1") == 0  # trained on nothing itself
    assert capsys.readouterr().out == ""
    assert _lineage(url, "--checkpoint", "fp8-1", "--ancestors", "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in document["checkpoints"]] == ["fp8-1", "sft-1", "base"]
    assert {d["id"] for d in document["datasets"]} == {sft.sha256, prompts.sha256}
    assert document["records"] == sorted(prompts.ids())

    assert _lineage(url, "--checkpoint", "nope") == 1
    assert "no checkpoint nope" in capsys.readouterr().err


def test_a_record_leads_to_its_datasets_and_checkpoints_even_once_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "traffic.db"
    url = f"sqlite:///{db}"
    sft, prompts, unused = asyncio.run(_recorded(url))
    row = sft.train.ids()[0]

    assert _lineage(url, "--inference", row.upper()) == 0  # any spelling of the uuid
    out = capsys.readouterr().out
    assert f"inference {row}: in 2 datasets, trained 1 checkpoints (1 more inherited it)" in out
    assert f"dataset {sft.sha256[:12]} sft (train split)" in out
    assert "checkpoint sft-1 (candidate): trained on" in out
    assert "checkpoint fp8-1 (candidate): inherited from sft-1" in out

    assert _lineage(url, "--inference", unused, "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert document["datasets"] == [] and document["checkpoints"] == []

    with sqlite3.connect(db) as conn:  # the record is forgotten
        conn.execute("DELETE FROM feedback WHERE inference_id = ?", (row,))
        conn.execute("DELETE FROM inference WHERE id = ?", (row,))
    assert _lineage(url, "--inference", row, "--json") == 0
    document = json.loads(capsys.readouterr().out)
    assert {d["id"] for d in document["datasets"]} == {sft.sha256, prompts.sha256}
    assert [c["id"] for c in document["checkpoints"]] == ["sft-1"]
    assert document["inherited"] == [{"id": "fp8-1", "status": "candidate", "from": "sft-1"}]
    assert _lineage(url, "--checkpoint", "sft-1", "--verify") == 1  # no longer rebuilds
    assert capsys.readouterr().err.count("hash differs (1 rows no longer stored)") == 2
