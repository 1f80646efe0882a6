"""vLLM launch config: the exact command lines and environments for CPU and GPU replicas."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import torch

from serving.replica import VllmReplica, find_free_port
from serving.vllm_config import (
    GpuSettings,
    KvEventsSettings,
    LmCacheSettings,
    OtlpTraces,
    VllmLaunchConfig,
)

MODEL = Path("/models/base-abc")
CACHE = Path("/srv/switchyard/.cache")


def cpu_config(**overrides: object) -> VllmLaunchConfig:
    return VllmLaunchConfig.model_validate(
        {"model_dir": MODEL, "cache_dir": CACHE, "port": 8100, **overrides}
    )


def test_cpu_command_line_is_explicit_about_every_serving_choice() -> None:
    assert cpu_config(enforce_eager=True).command() == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(MODEL),
        "--served-model-name",
        "switchyard-local",
        "--host",
        "127.0.0.1",
        "--port",
        "8100",
        "--dtype",
        "bfloat16",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        "32",
        "--block-size",
        "32",
        "--enable-prefix-caching",
        "--seed",
        "0",
        "--enforce-eager",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--enable-prompt-tokens-details",
        "--disable-uvicorn-access-log",
    ]


def test_cpu_environment_sets_kv_cache_and_keeps_caches_in_the_project() -> None:
    env = cpu_config().environment({"PATH": "/bin", "VLLM_SERVER_DEV_MODE": "1"})
    assert env["PATH"] == "/bin"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "VLLM_CPU_OMP_THREADS_BIND" not in env  # vLLM's own "auto" binding
    assert env["VLLM_SERVER_DEV_MODE"] == "0"  # ours wins over the inherited value
    for name in ("VLLM_CACHE_ROOT", "HF_HOME", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert Path(env[name]).is_relative_to(CACHE), name
    assert env["HF_HUB_OFFLINE"] == "1"
    assert not any(name.startswith("LMCACHE_") for name in env)


def test_cpu_options_map_to_flags_and_variables() -> None:
    config = cpu_config(
        dev_mode=True,
        enable_prefix_caching=False,
        enable_tool_calling=False,
        block_size=128,
        cpu={"kvcache_space_gib": 4, "omp_threads_bind": "0-1"},
        extra_args=("--max-num-batched-tokens", "2048"),
    )
    command = config.command()
    assert "--no-enable-prefix-caching" in command
    assert "--enable-auto-tool-choice" not in command
    assert command[command.index("--block-size") + 1] == "128"
    assert command[-2:] == ["--max-num-batched-tokens", "2048"]
    assert config.resolved_block_size == 128
    env = config.environment({})
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"


def test_prefix_cache_hash_capacity_and_kv_events_are_first_class_flags() -> None:
    config = cpu_config(
        prefix_caching_hash_algo="sha256_cbor",
        num_gpu_blocks_override=320,
        kv_events=KvEventsSettings(
            endpoint="tcp://*:5557", replay_endpoint="tcp://*:5558", topic="kv"
        ),
    )
    command = config.command()
    assert command[command.index("--prefix-caching-hash-algo") + 1] == "sha256_cbor"
    assert command[command.index("--num-gpu-blocks-override") + 1] == "320"
    assert json.loads(command[command.index("--kv-events-config") + 1]) == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "replay_endpoint": "tcp://*:5558",
        "topic": "kv",
    }
    # Unset, vLLM's own defaults apply: no flag at all.
    plain = cpu_config().command()
    for flag in ("--prefix-caching-hash-algo", "--num-gpu-blocks-override", "--kv-events-config"):
        assert flag not in plain


def test_traces_send_vllms_spans_to_the_gateways_collector_over_otlp_http() -> None:
    """One endpoint for both (the gateway's telemetry.otlp_endpoint): OTLP/HTTP, not vLLM's
    default gRPC, with the spans' path added."""
    config = cpu_config(traces={"endpoint": "http://collector:4318/"})
    command = config.command()
    assert command[command.index("--otlp-traces-endpoint") + 1] == "http://collector:4318/v1/traces"
    env = config.environment({})
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_SERVICE_NAME"] == "switchyard-vllm"
    grpc = cpu_config(traces={"endpoint": "collector:4317", "protocol": "grpc"})
    assert grpc.command()[grpc.command().index("--otlp-traces-endpoint") + 1] == "collector:4317"
    assert grpc.environment({})["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "grpc"
    plain = cpu_config()
    assert "--otlp-traces-endpoint" not in plain.command()
    assert not any(k.startswith("OTEL_") for k in plain.environment({}))


@pytest.mark.slow
def test_vllms_own_parser_reads_our_prefix_cache_and_kv_event_flags() -> None:
    """The flag names and JSON keys are the installed vLLM's (imports vLLM: slow)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = cpu_config(
        prefix_caching_hash_algo="sha256_cbor",
        num_gpu_blocks_override=320,
        kv_events=KvEventsSettings(
            endpoint="tcp://*:5557",
            replay_endpoint="tcp://*:5558",
            topic="kv",
            buffer_steps=500,
            hwm=1000,
        ),
        traces=OtlpTraces(endpoint="http://127.0.0.1:4318"),
    )
    # vLLM leaves FlexibleArgumentParser.__init__ unannotated:
    parser = make_arg_parser(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    args = AsyncEngineArgs.from_cli_args(parser.parse_args(config.command()[3:]))
    assert args.prefix_caching_hash_algo == "sha256_cbor"
    assert args.num_gpu_blocks_override == 320
    events = args.kv_events_config
    assert events is not None and events.enable_kv_cache_events
    assert (events.publisher, events.endpoint, events.replay_endpoint, events.topic) == (
        "zmq", "tcp://*:5557", "tcp://*:5558", "kv")  # fmt: skip
    assert (events.buffer_steps, events.hwm) == (500, 1000)
    assert args.otlp_traces_endpoint == "http://127.0.0.1:4318/v1/traces"
    assert not args.disable_log_stats  # vLLM's spans are built from its stats


def test_parallel_sizes_map_to_vllms_flags_only_above_one() -> None:
    config = cpu_config(
        device="gpu", tensor_parallel_size=4, pipeline_parallel_size=2, data_parallel_size=2
    )
    command = config.command()
    assert command[command.index("--tensor-parallel-size") + 1] == "4"
    assert command[command.index("--pipeline-parallel-size") + 1] == "2"
    assert command[command.index("--data-parallel-size") + 1] == "2"
    assert config.world_size == 16
    plain = cpu_config()
    assert plain.world_size == 1
    assert not any(flag.endswith("-parallel-size") for flag in plain.command())


@pytest.mark.slow
def test_vllms_own_parser_reads_our_parallel_sizes() -> None:
    """The flag names are the installed vLLM's (imports vLLM: slow)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    config = cpu_config(
        device="gpu", tensor_parallel_size=2, pipeline_parallel_size=3, data_parallel_size=4
    )
    parser = make_arg_parser(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    args = AsyncEngineArgs.from_cli_args(parser.parse_args(config.command()[3:]))
    sizes = (args.tensor_parallel_size, args.pipeline_parallel_size, args.data_parallel_size)
    assert sizes == (2, 3, 4)


def test_gpu_command_line_with_fp8_and_lmcache_offload() -> None:
    config = cpu_config(
        device="gpu",
        gpu=GpuSettings(
            quantization="fp8",
            gpu_memory_utilization=0.8,
            kv_cache_dtype="fp8",
            lmcache=LmCacheSettings(max_local_cpu_size_gib=20),
        ),
    )
    command = config.command()
    tail = command[command.index("--disable-uvicorn-access-log") + 1 :]
    assert tail == [
        "--gpu-memory-utilization",
        "0.8",
        "--quantization",
        "fp8",
        "--kv-cache-dtype",
        "fp8",
        "--kv-transfer-config",
        '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}',
    ]
    assert json.loads(tail[-1]) == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    assert command[command.index("--block-size") + 1] == "16"
    env = config.environment({})
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "20.0"
    assert env["LMCACHE_CHUNK_SIZE"] == "256"
    assert "VLLM_CPU_KVCACHE_SPACE" not in env


@pytest.mark.parametrize(
    ("overrides", "hint"),
    [
        ({"gpu": {"lmcache": {}}}, "set device='gpu' or gpu.lmcache=None"),
        ({"gpu": {"quantization": "fp8"}}, "set device='gpu' or gpu.quantization=None"),
        ({"gpu": {"kv_cache_dtype": "fp8"}}, "gpu.kv_cache_dtype='auto'"),
        ({"block_size": 16}, "multiple of 32"),
        (
            {"device": "gpu", "enable_prefix_caching": False, "gpu": {"lmcache": {}}},
            "set enable_prefix_caching=True",
        ),
        ({"devices": "gpu"}, "Extra inputs are not permitted"),
        (
            {"enable_prefix_caching": False, "kv_events": {"endpoint": "tcp://*:5557"}},
            "set enable_prefix_caching=True or kv_events=None",
        ),
        (
            {"enable_prefix_caching": False, "prefix_caching_hash_algo": "sha256_cbor"},
            "needs enable_prefix_caching=True",
        ),
        ({"kv_events": {"endpoint": "localhost:5557"}}, "looks like tcp://"),
        ({"tensor_parallel_size": 2}, "set device='gpu', or keep tensor_parallel_size"),
        ({"pipeline_parallel_size": 2}, "ranks do not serve here"),
        ({"data_parallel_size": 2}, "and run more replicas"),
        (
            {"device": "gpu", "data_parallel_size": 2, "kv_events": {"endpoint": "tcp://*:5557"}},
            "set data_parallel_size=1",
        ),
        ({"tensor_parallel_size": 0}, "greater than or equal to 1"),
        ({"prefix_caching_hash_algo": "md5"}, "sha256_cbor"),
        (
            {"traces": {"endpoint": "http://c:4318"}, "extra_args": ["--disable-log-stats"]},
            "drop --disable-log-stats from extra_args or set traces=None",
        ),
    ],
)
def test_invalid_combinations_say_what_to_set(overrides: dict[str, object], hint: str) -> None:
    with pytest.raises(ValueError, match=hint.replace("(", r"\(").replace(")", r"\)")):
        cpu_config(**overrides)


def test_base_url_brackets_ipv6_hosts() -> None:
    assert cpu_config().base_url == "http://127.0.0.1:8100"
    assert cpu_config(host="::1").base_url == "http://[::1]:8100"


@pytest.mark.requires_gpu
@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU: fp8 MoE kernels and LMCache"
)
def test_gpu_replica_serves_fp8_weights(tmp_path: Path) -> None:
    import httpx

    from serving.build import ensure_demo_model
    from tests.fixtures.vllm_fixture import cache_dir

    lmcache = None
    try:
        import lmcache as _lmcache  # noqa: F401

        lmcache = LmCacheSettings(max_local_cpu_size_gib=2)
    except ImportError:
        pass
    cache = cache_dir()
    config = VllmLaunchConfig(
        model_dir=ensure_demo_model(cache),
        cache_dir=cache,
        port=find_free_port(),
        device="gpu",
        gpu=GpuSettings(quantization="fp8", gpu_memory_utilization=0.3, lmcache=lmcache),
    )
    replica = VllmReplica(config, log_path=tmp_path / "vllm-gpu.log")
    replica.start()
    try:
        asyncio.run(replica.wait_ready(600))
        response = httpx.post(
            f"{replica.base_url}/v1/chat/completions",
            json={
                "model": config.served_model_name,
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 8,
            },
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["message"]["role"] == "assistant"
    finally:
        replica.stop()


def test_eager_cpu_replica_disables_lazy_torch_compile() -> None:
    # The first logprobs request would otherwise build vLLM's compiled sampler op with g++
    # inside the engine step and stall every request in flight (the hostile run's "hang").
    assert cpu_config(enforce_eager=True).environment({})["TORCHDYNAMO_DISABLE"] == "1"
    assert "TORCHDYNAMO_DISABLE" not in cpu_config(enforce_eager=False).environment({})
