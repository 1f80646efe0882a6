"""Base training: deterministic split and data, a learning run, and a checkpoint vLLM can load."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS

from serving import train_base
from serving.base_checkpoints import ensure_trained, find_trained
from serving.base_corpus import CorpusSpec, is_held_out, split_files, token_windows
from serving.build import checkpoint_digest, ensure_demo_model, make_version_id, read_version
from serving.logprob_probe import token_logprobs
from serving.model_config import VERSION_FILE, CheckpointVersion, ModelSpec
from serving.tokenizer import TOKENIZER_FILES, load_tokenizer, stdlib_sources
from serving.train_base import LOSS_CURVE_FILE, QUICK_TRAINING, TrainBaseConfig
from serving.train_base import train_base as run_training
from serving.training import ExpertsImplementation
from tests.fixtures.vllm_fixture import cache_dir

TINY_RUN = QUICK_TRAINING.model_copy(update={"steps": 3, "eval_every": 3})


@pytest.fixture(scope="module")
def init_dir() -> Path:
    return ensure_demo_model(cache_dir())


def test_split_is_a_pure_function_of_the_path() -> None:
    spec = CorpusSpec()
    assert is_held_out("json/decoder.py", spec) == is_held_out("json/decoder.py", spec)
    salted = spec.model_copy(update={"split_salt": "other"})
    names = [f"pkg/module_{i}.py" for i in range(2000)]
    held = [n for n in names if is_held_out(n, spec)]
    assert 0.03 < len(held) / len(names) < 0.07  # held_out_fraction = 0.05
    assert held != [n for n in names if is_held_out(n, salted)]


def test_split_files_is_disjoint_stable_and_order_free() -> None:
    spec = CorpusSpec()
    files = stdlib_sources()
    train, held_out = split_files(spec, files)
    assert not set(train) & set(held_out)
    assert len(train) + len(held_out) == len(files)
    assert split_files(spec, list(reversed(files))) == (train, held_out)
    assert held_out


def test_token_windows_are_fixed_length_and_separated_by_endoftext(init_dir: Path) -> None:
    tokenizer = load_tokenizer(init_dir)
    files = split_files(CorpusSpec())[0][:5]
    windows = token_windows(
        tokenizer, files, max_bytes=20_000, max_bytes_per_file=4_000, seq_len=16
    )
    assert windows.dtype == torch.long and windows.shape[1] == 17
    assert (windows == 0).sum() >= 1  # <|endoftext|> between documents
    with pytest.raises(ValueError, match="shorter than one window"):
        token_windows(tokenizer, files[:1], max_bytes=1_000, max_bytes_per_file=1_000, seq_len=4096)


@pytest.mark.slow
def test_training_is_deterministic_and_writes_a_versioned_checkpoint(
    init_dir: Path, tmp_path: Path
) -> None:
    first = run_training(init_dir, tmp_path / "a", TINY_RUN, progress=False)
    second = run_training(init_dir, tmp_path / "b", TINY_RUN, progress=False)
    assert first.version_id == second.version_id  # bit-identical weights
    checkpoint = first.checkpoint_dir
    assert (
        checkpoint.name
        == first.version_id
        == make_version_id("pretrain", checkpoint_digest(checkpoint))
    )
    version = read_version(checkpoint)
    init = read_version(init_dir)
    assert version.parent == init.version_id and version.spec == init.spec
    assert version.seed == TINY_RUN.seed
    assert version.metadata["config"] == json.loads(TINY_RUN.model_dump_json())
    assert version.metadata["loss_curve"] == LOSS_CURVE_FILE
    assert version.eval["held_out_ppl"] == pytest.approx(math.exp(version.eval["held_out_loss"]))
    assert version.eval["held_out_ppl"] < version.eval["held_out_ppl_init"]
    assert (checkpoint / LOSS_CURVE_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in TOKENIZER_FILES:
        assert (checkpoint / name).read_bytes() == (init_dir / name).read_bytes()
    # The stored probe is what transformers computes from the saved weights.
    assert version.probe is not None
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    assert token_logprobs(model, version.probe.prompt_token_ids) == pytest.approx(
        version.probe.logprobs, abs=1e-4
    )
    config = json.loads((checkpoint / "config.json").read_text())
    assert config["output_router_logits"] is False
    assert config["torch_dtype" if "torch_dtype" in config else "dtype"] == "bfloat16"


@pytest.mark.slow
def test_ensure_trained_reuses_a_finished_run(
    init_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert find_trained(tmp_path, init_dir, TINY_RUN) is None
    made = ensure_trained(init_dir, tmp_path, TINY_RUN)

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("trained again")

    monkeypatch.setattr(train_base, "train_base", no_training)
    assert ensure_trained(init_dir, tmp_path, TINY_RUN) == made
    other = TINY_RUN.model_copy(update={"seed": 1})
    assert find_trained(tmp_path, init_dir, other) is None


@pytest.mark.slow
def test_cli_trains_and_prints_the_figures(
    init_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--out", str(tmp_path), "--init", str(init_dir), "--steps", "2", "--seq-len", "16"]
    assert train_base.main([*argv, "--batch-size", "2", "--train-bytes", "30000"]) == 0
    out = capsys.readouterr().out
    assert "held-out ppl" in out
    (checkpoint,) = tmp_path.glob(f"pretrain-*/{VERSION_FILE}")
    config = read_version(checkpoint.parent).metadata["config"]
    assert isinstance(config, dict) and config["steps"] == 2


def test_experts_implementations_are_ones_transformers_accepts() -> None:
    accepted = {"eager", *ALL_EXPERTS_FUNCTIONS.keys()}
    assert set(get_args(ExpertsImplementation)) <= accepted
    assert TrainBaseConfig().experts_implementation == "eager"  # the CPU's fastest
    with pytest.raises(ValueError, match="experts_implementation"):
        TrainBaseConfig.model_validate({"experts_implementation": "fastest"})


def _write_version(directory: Path, parent: str | None, config: object = None) -> Path:
    directory.mkdir(parents=True)
    version = CheckpointVersion(
        version_id=directory.name,
        parent=parent,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        spec=ModelSpec(),
        seed=0,
        metadata={} if config is None else {"kind": "base-training", "config": config},
    )
    (directory / VERSION_FILE).write_text(version.model_dump_json(exclude_defaults=True))
    return directory


def test_the_experts_kernels_are_no_part_of_a_trained_checkpoint_identity(
    tmp_path: Path,
) -> None:
    init = _write_version(tmp_path / "base-000000000001", None)
    out = tmp_path / "trained"
    saved = json.loads(TINY_RUN.model_dump_json())
    # A checkpoint written before the field existed (a run going on now writes one).
    before = {k: v for k, v in saved.items() if k != "experts_implementation"}
    assert len(before) == len(saved) - 1
    old = _write_version(out / "pretrain-000000000002", init.name, before)
    on_gpu = TINY_RUN.model_copy(update={"experts_implementation": "grouped_mm"})
    assert find_trained(out, init, TINY_RUN) == old
    assert find_trained(out, init, on_gpu) == old
    assert find_trained(out, init, TINY_RUN.model_copy(update={"seed": 1})) is None

    # And one written on other kernels is found by a CPU run of the same config.
    other = tmp_path / "other"
    gpu_made = _write_version(
        other / "pretrain-000000000003", init.name, json.loads(on_gpu.model_dump_json())
    )
    assert find_trained(other, init, TINY_RUN) == gpu_made
