"""Exported JSONL and Parquet load with Hugging Face ``datasets`` and give the same records.

Only this module imports ``datasets`` (slow to import).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_export import traffic
from traffic.export import ExportConfig, export_dataset
from traffic.export.config import SplitConfig


def _load(datasets: Any, builder: str, path: Path, cache: Path) -> list[dict[str, Any]]:
    ds = datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(cache))
    return list(ds)


@pytest.mark.parametrize("kind", ["sft", "preference_trl", "preference_openai", "rl_prompts"])
def test_jsonl_and_parquet_load_to_the_same_records(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    datasets.disable_progress_bars()
    out = tmp_path / "out"
    config = ExportConfig(
        kind=kind,
        out_dir=out,
        formats=("jsonl", "parquet"),  # type: ignore[arg-type]
        split=SplitConfig(eval_fraction=0.5),
    )
    manifest = export_dataset(traffic(), config, legacy=syn.LIVE)
    for split in ("train", "eval"):
        if manifest.counts.model_dump()[split] == 0:
            continue
        raw = [json.loads(line) for line in (out / f"{split}.jsonl").read_text().splitlines()]
        from_json = _load(datasets, "json", out / f"{split}.jsonl", tmp_path / "cache")
        from_parquet = _load(datasets, "parquet", out / f"{split}.parquet", tmp_path / "cache")
        assert from_json == from_parquet
        # datasets fills a top-level field some records lack with None; otherwise identical.
        columns = set().union(*raw)
        assert from_parquet == [{c: r.get(c) for c in sorted(columns)} | r for r in raw]
        assert set(from_parquet[0]) == columns
