"""Launch presets: the GPU fp8 + prefix caching + LMCache configuration and its command line."""

from __future__ import annotations

import asyncio
import json
import shlex
from pathlib import Path

import pytest
import torch

from serving import launch
from serving.launch import launch_config, load_preset, preset_names, rendered
from serving.reload_worker import RELOAD_WORKER_EXTENSION
from serving.replica import VllmReplica, find_free_port

MODEL = Path("/models/fp8-abc")
CACHE = Path("/srv/switchyard/.cache")


def gpu_preset(**overrides: object) -> object:
    return launch_config(
        "gpu-fp8-lmcache", model_dir=MODEL, cache_dir=CACHE, port=8200, **overrides
    )


def test_presets_are_listed_and_unknown_ones_name_the_known() -> None:
    assert {"gpu-fp8-lmcache", "cpu-dev"} <= set(preset_names())
    with pytest.raises(KeyError, match="gpu-fp8-lmcache"):
        load_preset("gpu-fp16")


def test_gpu_preset_serves_fp8_with_prefix_caching_and_lmcache_offload() -> None:
    config = launch_config("gpu-fp8-lmcache", model_dir=MODEL, cache_dir=CACHE, port=8200)
    command = config.command()
    assert config.device == "gpu" and config.resolved_block_size == 16
    assert "--enable-prefix-caching" in command
    # The fp8 checkpoint's config selects the kernels; no online quantization flag.
    assert "--quantization" not in command
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.85"
    transfer = json.loads(command[command.index("--kv-transfer-config") + 1])
    assert transfer == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert command[command.index("--worker-extension-cls") + 1] == RELOAD_WORKER_EXTENSION
    env = config.environment({})
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "20.0"
    assert env["LMCACHE_CHUNK_SIZE"] == "256"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env


def test_preset_validation_is_the_launch_configs_own() -> None:
    with pytest.raises(ValueError, match="LMCache KV offload needs a GPU replica"):
        launch_config("gpu-fp8-lmcache", model_dir=MODEL, cache_dir=CACHE, device="cpu")


def test_cpu_dev_preset_can_be_hot_swapped() -> None:
    config = launch_config("cpu-dev", model_dir=MODEL, cache_dir=CACHE)
    assert config.device == "cpu" and config.dev_mode and config.enforce_eager
    assert config.worker_extension_cls == RELOAD_WORKER_EXTENSION


def test_cli_prints_the_environment_and_the_exact_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--preset", "gpu-fp8-lmcache", "--model", str(MODEL), "--cache-dir", str(CACHE)]
    assert launch.main([*argv, "--port", "8200"]) == 0
    printed = capsys.readouterr().out.strip()
    config = launch_config("gpu-fp8-lmcache", model_dir=MODEL, cache_dir=CACHE, port=8200)
    assert printed == rendered(config)
    words = shlex.split(printed)
    assert "LMCACHE_LOCAL_CPU=True" in words
    assert words[words.index("--model") + 1] == str(MODEL)
    assert "--otlp-traces-endpoint" not in words


def test_cli_turns_vllms_traces_on_with_the_gateways_collector(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--preset", "cpu-dev", "--model", str(MODEL), "--otlp-endpoint", "http://c:4318"]
    assert launch.main(argv) == 0
    words = shlex.split(capsys.readouterr().out.strip())
    assert words[words.index("--otlp-traces-endpoint") + 1] == "http://c:4318/v1/traces"
    assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf" in words


@pytest.mark.requires_gpu
@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: fp8 kernels and LMCache offload"
)
def test_gpu_preset_boots_and_reuses_a_shared_prefix(tmp_path: Path) -> None:
    pytest.importorskip("lmcache", reason="LMCache is installed with the `gpu` extra")
    import httpx

    from serving.build import ensure_demo_model
    from serving.fp8 import export_fp8
    from tests.fixtures.vllm_fixture import cache_dir

    cache = cache_dir()
    export = export_fp8(ensure_demo_model(cache), tmp_path, drift_window_count=1)
    config = launch_config(
        "gpu-fp8-lmcache",
        model_dir=export.fp8_dir,
        cache_dir=cache,
        port=find_free_port(),
        gpu={"gpu_memory_utilization": 0.3, "lmcache": {"max_local_cpu_size_gib": 2}},
    )
    replica = VllmReplica(config, log_path=tmp_path / "vllm-gpu-preset.log")
    replica.start()
    try:
        asyncio.run(replica.wait_ready(600))
        prefix = "def shared_prefix():\n" + "    x = 1\n" * 200
        usage = []
        for suffix in ("a", "b"):
            response = httpx.post(
                f"{replica.base_url}/v1/completions",
                json={
                    "model": config.served_model_name,
                    "prompt": prefix + suffix,
                    "max_tokens": 4,
                },
                timeout=120,
            )
            assert response.status_code == 200, response.text
            usage.append(response.json()["usage"])
        cached = (usage[1].get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        assert cached >= 256
    finally:
        replica.stop()
