"""Checkpoint building: deterministic versions that transformers loads and runs."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from serving.build import (
    build_model,
    checkpoint_digest,
    ensure_demo_model,
    main,
    read_version,
    weights_digest,
)
from serving.model_config import VERSION_FILE, ModelSpec
from serving.tokenizer import TokenizerSpec, train_tokenizer

VOCAB = 1024
SPEC = ModelSpec(vocab_size=VOCAB)


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(TokenizerSpec(vocab_size=VOCAB, sample_bytes=200_000), out)
    return out


@pytest.fixture(scope="module")
def checkpoint(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model(SPEC, tokenizer_dir, tmp_path_factory.mktemp("models"), seed=7)


def test_checkpoint_directory_has_everything_vllm_loads(checkpoint: Path) -> None:
    names = {path.name for path in checkpoint.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        VERSION_FILE,
    } <= names
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    assert config["model_type"] == "qwen3_moe"
    assert config["num_experts"] == SPEC.num_experts
    assert config["vocab_size"] == VOCAB
    generation = json.loads((checkpoint / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [2, 0]


def test_version_file_names_the_directory_and_records_spec_and_seed(checkpoint: Path) -> None:
    version = read_version(checkpoint)
    assert checkpoint.name == version.version_id
    assert version.version_id == f"base-{checkpoint_digest(checkpoint)[:12]}"
    assert version.parent is None
    assert version.seed == 7
    assert version.spec == SPEC
    raw = json.loads((checkpoint / VERSION_FILE).read_text())
    assert set(raw) == {"version_id", "parent", "created_at", "spec", "seed"}


def test_version_covers_weights_and_tokenizer(checkpoint: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(checkpoint, copy)
    assert checkpoint_digest(copy) == checkpoint_digest(checkpoint)
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config["chat_template"] += "{# changed #}"
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    assert checkpoint_digest(copy) != checkpoint_digest(checkpoint)
    assert weights_digest(copy) == weights_digest(checkpoint)


def test_same_seed_gives_same_version_and_other_seed_differs(
    checkpoint: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    again = build_model(SPEC, tokenizer_dir, tmp_path / "a", seed=7)
    other = build_model(SPEC, tokenizer_dir, tmp_path / "b", seed=8)
    assert again.name == checkpoint.name
    assert other.name != checkpoint.name
    # Rebuilding into the same parent keeps the existing directory.
    assert build_model(SPEC, tokenizer_dir, tmp_path / "a", seed=7) == again
    assert [p.name for p in (tmp_path / "a").iterdir()] == [again.name]


def test_checkpoint_loads_with_transformers_and_runs_a_forward_pass(checkpoint: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    assert sum(p.numel() for p in model.parameters()) == SPEC.parameter_count()
    encoded = tokenizer.apply_chat_template(
        [{"role": "user", "content": "def add(a, b):"}],
        add_generation_prompt=True,
        return_dict=True,
        return_tensors="pt",
    )
    assert not isinstance(encoded, str | list)
    input_ids = encoded["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=input_ids).logits
    assert logits.shape == (1, input_ids.shape[1], VOCAB)
    assert torch.isfinite(logits).all()


def test_presets_stay_in_their_size_class() -> None:
    tiny = ModelSpec.preset("tiny").parameter_count()
    small = ModelSpec.preset("small").parameter_count()
    assert 1_000_000 < tiny < 5_000_000
    assert 10_000_000 < small < 60_000_000


def test_invalid_shapes_and_short_vocab_are_rejected(tokenizer_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="num_key_value_heads"):
        ModelSpec(num_attention_heads=4, num_key_value_heads=3)
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        ModelSpec(num_experts=2, num_experts_per_tok=4)
    with pytest.raises(ValueError, match="set vocab_size >= 1024"):
        build_model(ModelSpec(vocab_size=512), tokenizer_dir, tmp_path)


def test_ensure_demo_model_builds_once_then_reuses(tmp_path: Path) -> None:
    first = ensure_demo_model(tmp_path)
    assert first.parent == tmp_path / "models" / "tiny"
    assert read_version(first).spec == ModelSpec.preset("tiny")
    started = time.monotonic()
    assert ensure_demo_model(tmp_path) == first
    assert time.monotonic() - started < 1.0


def test_cli_builds_a_checkpoint(
    tokenizer_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--preset", "tiny", "--out", str(tmp_path), "--tokenizer-dir", str(tokenizer_dir)]
    assert main(argv) == 0
    (checkpoint,) = tmp_path.glob(f"base-*/{VERSION_FILE}")
    version = read_version(checkpoint.parent)
    assert version.spec == ModelSpec.preset("tiny")
    assert version.version_id in capsys.readouterr().out
