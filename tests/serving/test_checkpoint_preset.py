"""The Hugging Face checkpoint preset on a tiny random Qwen3-MoE saved as a release is: sharded
safetensors with an index, a Qwen2Tokenizer-class tokenizer and `chat_template.jinja`, all
written by transformers' own `save_pretrained`."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer

from gateway.config import parse_config
from serving.build import checkpoint_digest, make_version_id, read_version
from serving.checkpoint_preset import (
    CHAT_TEMPLATE_FILE,
    WEIGHTS_INDEX_FILE,
    CheckpointPresetError,
    HfCheckpointPreset,
    adopt_hf_checkpoint,
    expected_tensor_names,
    inspect_hf_checkpoint,
    launch_config,
    main,
)
from serving.fp8 import FP8_DTYPE, export_fp8, is_quantized
from serving.hotswap import HotSwapConfig, publish_weights
from serving.names import LOCAL_MODEL_NAME
from serving.replica import VllmReplica, find_free_port
from serving.swap_checks import (
    FP8_PROBE_TOLERANCE,
    HotSwapError,
    ProbeTolerance,
    add_probe_arguments,
    check_compatible,
    probe_tolerance,
    tolerance_from,
)
from serving.tokenizer import TokenizerSpec, load_tokenizer, train_tokenizer
from serving.training import load_float32
from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.hf_release import save_release
from tests.fixtures.vllm_fixture import READY_TIMEOUT_S, cache_dir

MESSAGES = [{"role": "user", "content": "Write a Python hello world."}]
ADMIN_TOKEN = "checkpoint-preset-admin"


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A small byte-level BPE with ChatML and hermes tools, trained from local text in seconds.
    target = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(TokenizerSpec(vocab_size=512, sample_bytes=200_000), target)
    return target


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory, tokenizer_dir: Path) -> Path:
    return save_release(tmp_path_factory.mktemp("Qwen3-tiny-A0B"), tokenizer_dir)


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def adopted(release: Path, models_dir: Path) -> Path:
    return adopt_hf_checkpoint(HfCheckpointPreset(path=release), models_dir)


@pytest.fixture
def copy_of(tmp_path: Path) -> Callable[[Path], Path]:
    def copy(source: Path) -> Path:
        return Path(shutil.copytree(source, tmp_path / "copy"))

    return copy


def test_the_release_fixture_is_sharded_with_a_separate_chat_template(release: Path) -> None:
    shards = sorted(release.glob("model-*.safetensors"))
    assert len(shards) > 1 and (release / WEIGHTS_INDEX_FILE).is_file()
    assert (release / CHAT_TEMPLATE_FILE).is_file()
    assert "chat_template" not in json.loads((release / "tokenizer_config.json").read_text())


def test_adoption_reads_the_architecture_from_the_checkpoint_config(
    release: Path, adopted: Path
) -> None:
    config = json.loads((release / "config.json").read_text())
    version = read_version(adopted)
    assert version.version_id == make_version_id("hf", checkpoint_digest(adopted))
    assert version.parent is None and version.metadata["source"] == str(release.resolve())
    spec = version.spec
    assert (spec.num_experts, spec.num_experts_per_tok) == (config["num_local_experts"], 2)
    assert spec.hidden_size == config["hidden_size"] and spec.head_dim == config["head_dim"]
    assert spec.max_position_embeddings == config["max_position_embeddings"]
    assert spec.rope_theta == config["rope_parameters"]["rope_theta"]
    assert spec.parameter_count() == sum(p.numel() for p in load_float32(adopted).parameters())


def test_adopted_weights_are_the_release_shards_linked_not_copied(
    release: Path, adopted: Path
) -> None:
    shards = sorted(adopted.glob("*.safetensors"))
    assert [s.name for s in shards] == sorted(s.name for s in release.glob("*.safetensors"))
    assert all(s.is_symlink() and s.resolve().parent == release.resolve() for s in shards)
    source, loaded = load_float32(release), load_float32(adopted)
    ids = torch.arange(1, 40)[None, :]
    with torch.no_grad():
        assert torch.equal(source(input_ids=ids).logits, loaded(input_ids=ids).logits)


def test_the_chat_template_moves_inline_and_renders_as_from_the_release(
    release: Path, adopted: Path
) -> None:
    config = json.loads((adopted / "tokenizer_config.json").read_text())
    assert config["chat_template"] == (release / CHAT_TEMPLATE_FILE).read_text()
    assert not (adopted / CHAT_TEMPLATE_FILE).exists()
    expected = AutoTokenizer.from_pretrained(str(release)).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    ours = load_tokenizer(adopted).apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    assert ours == expected and "<|im_start|>assistant" in ours


def test_adopting_the_same_release_again_finds_the_same_directory(
    release: Path, adopted: Path, models_dir: Path
) -> None:
    again = adopt_hf_checkpoint(HfCheckpointPreset(path=release), models_dir)
    assert again == adopted
    assert [p.name for p in (models_dir / "hf").iterdir()] == [adopted.name]


def test_a_copied_adoption_holds_the_same_weights_as_files(
    release: Path, adopted: Path, tmp_path: Path
) -> None:
    copied = adopt_hf_checkpoint(HfCheckpointPreset(path=release, weights="copy"), tmp_path)
    assert not any(p.is_symlink() for p in copied.iterdir())
    assert read_version(copied).version_id == read_version(adopted).version_id


def test_a_transformers_4_config_gives_the_same_spec(
    release: Path, adopted: Path, copy_of: Callable[[Path], Path]
) -> None:
    old_style = copy_of(release)
    config = json.loads((old_style / "config.json").read_text())
    config["num_experts"] = config.pop("num_local_experts")
    config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]
    config["torch_dtype"] = config.pop("dtype")
    (old_style / "config.json").write_text(json.dumps(config))
    assert inspect_hf_checkpoint(old_style).spec == read_version(adopted).spec


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (
            lambda d: _edit_json(
                d / "config.json", model_type="qwen3", architectures=["Qwen3ForCausalLM"]
            ),
            "takes Qwen3-MoE checkpoints",
        ),
        (lambda d: _edit_json(d / "config.json", mlp_only_layers=[0]), "mlp_only_layers"),
        (
            lambda d: _edit_json(d / "config.json", quantization_config={"quant_method": "fp8"}),
            "already quantized",
        ),
        (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (lambda d: (d / CHAT_TEMPLATE_FILE).unlink(), "no chat template"),
        (lambda d: (d / "model-00002-of-00004.safetensors").unlink(), "shard(s) absent"),
        (
            lambda d: [p.unlink() for p in d.glob("model*.safetensors*")],
            "no weights",
        ),
        (lambda d: _edit_json(d / "config.json", num_hidden_layers=3), "not a Qwen3-MoE of its"),
        (lambda d: _edit_json(d / "config.json", vocab_size=300), "more than vocab_size"),
    ],
    ids=[
        "dense-qwen3",
        "dense-layers",
        "quantized",
        "no-tokenizer",
        "no-chat-template",
        "missing-shard",
        "no-weights",
        "config-weights-mismatch",
        "vocab-too-small",
    ],
)
def test_an_unsupported_or_incomplete_checkpoint_is_refused_with_the_reason(
    release: Path,
    copy_of: Callable[[Path], Path],
    tmp_path: Path,
    damage: Callable[[Path], object],
    message: str,
) -> None:
    broken = copy_of(release)
    damage(broken)
    with pytest.raises(CheckpointPresetError, match=re.escape(message)):
        adopt_hf_checkpoint(HfCheckpointPreset(path=broken), tmp_path / "models")
    assert not list((tmp_path / "models").glob("hf/hf-*"))


def test_the_cli_reports_a_refusal_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--checkpoint", str(tmp_path), "--out", str(tmp_path / "models")])
    assert exit_info.value.code == 2
    assert "config.json is missing" in capsys.readouterr().err


def test_the_cli_prints_the_adopted_directory_and_its_launch_command(
    release: Path, adopted: Path, models_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--checkpoint", str(release), "--out", str(models_dir)])
    out = capsys.readouterr().out
    assert str(adopted) in out and f"--model {adopted}" in out and "--gpu-memory-utilization" in out


def test_launch_config_caps_the_context_at_the_checkpoint_positions(
    adopted: Path, tmp_path: Path
) -> None:
    positions = read_version(adopted).spec.max_position_embeddings
    config = launch_config("gpu-hf-moe", adopted, cache_dir=tmp_path)
    assert config.max_model_len == positions and config.device == "gpu"
    command = config.command()
    assert command[command.index("--model") + 1] == str(adopted)
    cpu = launch_config("cpu-dev", adopted, cache_dir=tmp_path, max_model_len=1024)
    assert cpu.max_model_len == 1024 and cpu.dev_mode


def test_fp8_export_accepts_the_adopted_checkpoint_and_hot_swap_preflight_passes(
    adopted: Path, models_dir: Path
) -> None:
    export = export_fp8(adopted, models_dir / "fp8", drift_window_count=4)
    source = read_version(adopted)
    for directory in (export.fp8_dir, export.dequantized_dir):
        assert read_version(directory).parent == source.version_id
        assert read_version(directory).spec == source.spec
    fp8_config = json.loads((export.fp8_dir / "config.json").read_text())
    assert fp8_config["quantization_config"]["quant_method"] == "compressed-tensors"
    with safe_open(str(export.fp8_dir / "model.safetensors"), framework="pt") as handle:
        names = set(handle.keys())
        quantized = {n for n in expected_tensor_names(source.spec) if is_quantized(n)}
        assert quantized and all(handle.get_tensor(n).dtype == FP8_DTYPE for n in quantized)
    assert {n.removesuffix("_scale") for n in names if n.endswith("_scale")} == quantized
    # Experts and attention are quantized; greedy choices of the dequantized twin mostly agree.
    assert export.drift.greedy_agreement > 0.9
    assert export.drift.mean_abs_logprob_diff < 0.05
    check_compatible(export.dequantized_dir, adopted)
    check_compatible(adopted, export.dequantized_dir)
    # A bf16 candidate cannot be reloaded into replicas serving the fp8 export: refused up front.
    with pytest.raises(HotSwapError, match="cannot change the quantization"):
        check_compatible(adopted, export.fp8_dir)
    check_compatible(export.fp8_dir, export.fp8_dir)
    # The probe's bound follows the format served, unless the operator sets one.
    assert probe_tolerance(None, export.fp8_dir) == FP8_PROBE_TOLERANCE
    assert probe_tolerance(None, adopted) == ProbeTolerance()
    parser = argparse.ArgumentParser()
    add_probe_arguments(parser)
    asked = tolerance_from(parser.parse_args(["--probe-mean-abs", "0.5"]))
    assert asked == ProbeTolerance(mean_abs=0.5)
    assert probe_tolerance(asked, export.fp8_dir) == asked
    assert tolerance_from(parser.parse_args([])) is None


@pytest.fixture(scope="module")
def replica(adopted: Path) -> Iterator[VllmReplica]:
    config = launch_config(
        "cpu-dev", adopted, cache_dir=cache_dir(), port=find_free_port(), max_num_seqs=4
    )
    server = VllmReplica(config, log_path=cache_dir() / "logs" / "vllm-hf-preset.log")
    server.start()
    try:
        asyncio.run(server.wait_ready(READY_TIMEOUT_S))
        yield server
    finally:
        server.stop()


@pytest.mark.slow
async def test_a_cpu_replica_serves_the_adopted_checkpoint_and_takes_its_fp8_export(
    replica: VllmReplica, adopted: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with httpx.AsyncClient(base_url=replica.base_url, timeout=120) as client:
        chat = await client.post(
            "/v1/chat/completions",
            json={"model": LOCAL_MODEL_NAME, "messages": MESSAGES, "max_tokens": 8},
        )
        assert chat.status_code == 200, chat.text
        expected_prompt = load_tokenizer(adopted).apply_chat_template(
            MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        assert chat.json()["usage"]["prompt_tokens"] == len(expected_prompt)

    dequantized = export_fp8(adopted, models_dir / "fp8", drift_window_count=4).dequantized_dir
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
    gateway = GatewayThread(
        parse_config(
            {
                "backends": {
                    "local": {
                        "kind": "vllm",
                        "model": LOCAL_MODEL_NAME,
                        "replicas": [replica.base_url],
                        "weights_version": read_version(adopted).version_id,
                    }
                },
                "routing": {"default": "local", "aliases": {LOCAL_MODEL_NAME: "local"}},
                "store": {"enabled": False},
                "auth": {"required": False},
            }
        )
    ).start()
    try:
        report = await publish_weights(
            dequantized,
            adopted,
            [replica.base_url],
            HotSwapConfig(gateway_url=gateway.base_url, admin_token=ADMIN_TOKEN),
        )
    finally:
        gateway.stop()
    assert report.ok, report
    assert report.version == read_version(dequantized).version_id
    assert report.replicas[0].probe is not None and report.replicas[0].probe.passed
