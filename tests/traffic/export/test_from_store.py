"""Exports straight from the store: the filter (the store's own, validated from JSON), what an
export reads with it, and the same dataset built in memory."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.traffic.store.scenario import day, inference
from traffic.export import (
    TRAFFIC_QUERY,
    DatasetConfig,
    ExportConfig,
    dataset_from_store,
    export_from_store,
)
from traffic.export.config import SplitConfig
from traffic.store import InferenceFilter, StoreConfig, open_store


def test_the_traffic_query_is_the_store_filter_validated_from_json() -> None:
    query = TRAFFIC_QUERY.validate_python(
        {
            "since": "2025-03-02T14:00+02:00",
            "route_target": "local",
            "tags": {"family": "rename"},
            "has_feedback": "accepted",
            "ok_only": "true",  # query parameters arrive as strings
        }
    )
    assert query == InferenceFilter(
        since=datetime(2025, 3, 2, 12, 0, tzinfo=UTC),
        route_target="local",
        tags={"family": "rename"},
        has_feedback="accepted",
        ok_only=True,
    )
    assert TRAFFIC_QUERY.validate_python({}) == InferenceFilter()
    assert TRAFFIC_QUERY.dump_python(query, mode="json") == {
        "since": "2025-03-02T12:00:00Z",
        "until": None,
        "route_target": "local",
        "served_model": None,
        "api_key_id": None,
        "endpoint": None,
        "episode_id": None,
        "tags": {"family": "rename"},
        "has_feedback": "accepted",
        "ok_only": True,
    }


@pytest.mark.parametrize(
    "fields",
    [
        {"route": "local"},  # unknown key
        {"has_feedback": "liked"},
        {"since": "2025-03-02T14:00"},  # naive: its zone would be a guess
        {"ok_only": "maybe"},
        {"tags": {"family": 1}},
    ],
)
def test_the_traffic_query_rejects_bad_json(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TRAFFIC_QUERY.validate_python(fields)


async def test_export_from_store_reads_what_the_filter_selects(tmp_path: Path) -> None:
    backend = open_store(StoreConfig(url=f"sqlite:///{tmp_path / 'traffic.db'}"))
    await backend.connect()
    try:
        picked = inference(day(3))
        await backend.insert_inferences(
            [inference(day(1)), picked, inference(day(4), route_target="frontier-openai")]
        )
        query = InferenceFilter(since=day(2), route_target="local")
        config = ExportConfig(
            kind="rl_prompts", out_dir=tmp_path / "out", split=SplitConfig(eval_fraction=0.0)
        )
        manifest = await export_from_store(backend, query, config)
    finally:
        await backend.close()
    assert manifest.counts.rows_read == 1 and manifest.counts.train == 1
    assert manifest.filters == TRAFFIC_QUERY.dump_python(query, mode="json")
    assert manifest.filters["since"] == "2025-03-02T12:00:00Z"
    assert picked.id in (tmp_path / "out" / "train.jsonl").read_text()


async def test_a_dataset_from_the_store_is_the_export_in_memory(tmp_path: Path) -> None:
    backend = open_store(StoreConfig(url=f"sqlite:///{tmp_path / 'traffic.db'}"))
    await backend.connect()
    try:
        await backend.insert_inferences([inference(day(d)) for d in range(1, 6)])
        query = InferenceFilter(since=day(2))
        split = SplitConfig(eval_fraction=0.2)
        manifest = await export_from_store(
            backend, query, ExportConfig(kind="rl_prompts", out_dir=tmp_path / "out", split=split)
        )
        dataset = await dataset_from_store(
            backend, query, DatasetConfig(kind="rl_prompts", split=split)
        )
    finally:
        await backend.close()
    assert dataset.counts == manifest.counts and dataset.counts.rows_read == 4
    for part, records in (("train", dataset.train), ("eval", dataset.eval)):
        lines = (tmp_path / "out" / f"{part}.jsonl").read_text().splitlines()
        assert records == [json.loads(line) for line in lines]
