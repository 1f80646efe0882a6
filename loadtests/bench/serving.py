"""Serving benchmark on this machine: vLLM throughput and TTFT, hot-swap duration, fp8 figures.

    python -m loadtests.bench.serving                # make bench-serving
    BENCH_QUICK=1 python -m loadtests.bench.serving  # a few minutes (fewer, shorter requests)

What it does, in order:

1. Checkpoints: the tiny demo init and a short base-training run from it (`QUICK_TRAINING`,
   cached under the project cache), which is the hot-swap's new version.
2. fp8: exports the trained checkpoint (`serving.fp8`): size ratio (all tensors, and the
   quantized ones only) and the drift of the dequantized model against the bf16 one.
3. Replicas: two vLLM CPU replicas under the supervisor (one core each, `cpu-dev` settings:
   eager mode, 1 GiB KV cache, hot-swap routes); the boot time is reported.
4. Streams, against replica 0 directly (one core): 1 stream, then 16 concurrent streams, of
   streamed `/v1/completions` with a code prompt and `ignore_eos` (every request generates
   exactly `max_tokens`). Tokens/s = generated tokens / wall time of the phase; TTFT is the time
   to the first streamed token, p50 and p95 over the phase's requests.
5. Hot-swap: a gateway subprocess (`python -m gateway`, loopback, admin token) in front of both
   replicas; the trained checkpoint is published over the init with `publish_weights` while 4
   streams of chat completions run through the gateway. Reported: the whole publish (preflight
   included: digest, reference probes, warm-up), the longest time a replica was out of rotation
   and its parts (drain; reload + verify + probe), and requests that failed (should be 0).

Progress goes to stderr; the LAST line of stdout is one JSON object with every figure. Logs
and `report.json` go to `<cache>/bench/serving/`. SIGTERM or SIGINT stops the replicas and the
gateway (`serving.processes.ProcessFleet`) and exits 128+N.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import secrets
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from serving.base_checkpoints import ensure_trained
from serving.build import ensure_demo_model, read_version
from serving.fp8 import export_fp8
from serving.hotswap import HotSwapConfig, publish_weights
from serving.launch import launch_config
from serving.logprob_probe import PROBE_TEXT
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME
from serving.processes import Child, Interrupted, ProcessFleet
from serving.replica import find_free_port
from serving.supervisor import ReplicaSupervisor, SupervisorConfig, vllm_replica_factory
from serving.train_base import QUICK_TRAINING


@dataclass(frozen=True)
class BenchPlan:
    """How much load each phase sends."""

    single_requests: int
    concurrent_streams: int
    requests_per_stream: int
    max_tokens: int
    swap_load_streams: int

    @classmethod
    def for_mode(cls, quick: bool) -> BenchPlan:
        """BENCH_QUICK: fewer and shorter requests."""
        if quick:
            return cls(4, 16, 1, 32, 4)
        return cls(16, 16, 4, 128, 4)


@dataclass(frozen=True)
class StreamResult:
    ttft_s: float
    seconds: float
    tokens: int
    ok: bool


def log(message: str) -> None:
    print(f"[bench-serving] {message}", file=sys.stderr, flush=True)


async def stream_completion(
    client: httpx.AsyncClient, url: str, prompt: str, max_tokens: int
) -> StreamResult:
    """One streamed completion; TTFT is the first chunk carrying text."""
    body = {
        "model": LOCAL_MODEL_NAME,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    ttft: float | None = None
    tokens = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if ttft is None and any(c.get("text") for c in event.get("choices", [])):
                ttft = time.perf_counter() - started
            if event.get("usage"):
                tokens = int(event["usage"]["completion_tokens"])
        ok = response.status_code == 200
    elapsed = time.perf_counter() - started
    return StreamResult(ttft if ttft is not None else elapsed, elapsed, tokens, ok)


async def stream_phase(
    url: str, streams: int, per_stream: int, max_tokens: int
) -> dict[str, float]:
    """`streams` concurrent streams of `per_stream` sequential requests each."""
    results: list[StreamResult] = []

    async def worker(index: int) -> None:
        for n in range(per_stream):
            prompt = f"# request {index}-{n}\n{PROBE_TEXT}"
            results.append(await stream_completion(client, url, prompt, max_tokens))

    async with httpx.AsyncClient(timeout=300) as client:
        await stream_completion(client, url, PROBE_TEXT, 4)  # warm-up
        started = time.perf_counter()
        await asyncio.gather(*(worker(i) for i in range(streams)))
        wall = time.perf_counter() - started
    ttfts = sorted(r.ttft_s for r in results)
    return {
        "tok_s": sum(r.tokens for r in results) / wall,
        "ttft_ms_p50": 1000 * statistics.median(ttfts),
        "ttft_ms_p95": 1000 * ttfts[min(len(ttfts) - 1, int(0.95 * len(ttfts)))],
        "requests": float(len(results)),
        "failed": float(sum(not r.ok for r in results)),
    }


class GatewayProcess:
    """`python -m gateway` on a free loopback port, in front of the replicas."""

    def __init__(
        self, replicas: Sequence[str], weights_version: str, out_dir: Path, fleet: ProcessFleet
    ) -> None:
        self.fleet = fleet
        self.port = find_free_port()
        self.token = secrets.token_hex(16)
        self.config_path = out_dir / "gateway.yaml"
        config = {
            "backends": {
                "local": {
                    "kind": "vllm",
                    "model": LOCAL_MODEL_NAME,
                    "replicas": list(replicas),
                    "weights_version": weights_version,
                }
            },
            "routing": {"default": "local", "aliases": {LOCAL_MODEL_NAME: "local"}},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = out_dir / "gateway.log"
        self.process: Child | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def launch(self) -> None:
        env = {**os.environ, ADMIN_TOKEN_ENV: self.token}
        command = [sys.executable, "-m", "gateway", "--config", str(self.config_path)]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.process = self.fleet.spawn(command, name="gateway", log_path=self.log_path, env=env)

    async def wait_ready(self) -> None:
        assert self.process is not None
        async with httpx.AsyncClient(timeout=2) as client:
            for _ in range(600):
                if self.process.poll() is not None:
                    raise RuntimeError(f"gateway exited; see {self.log_path}")
                try:
                    if (await client.get(f"{self.url}/health")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
        raise RuntimeError(f"gateway not ready; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None:
            self.fleet.stop(self.process)


async def chat_load(url: str, stop: asyncio.Event, streams: int) -> list[bool]:
    """Streamed chat completions through the gateway until `stop`; one bool per request."""
    outcomes: list[bool] = []

    async def worker(index: int) -> None:
        n = 0
        while not stop.is_set():
            body = {
                "model": LOCAL_MODEL_NAME,
                "messages": [{"role": "user", "content": f"def f_{index}_{n}():"}],
                "max_tokens": 16,
                "stream": True,
            }
            try:
                async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
                    text = (await r.aread()).decode()
                    outcomes.append(r.status_code == 200 and "data: [DONE]" in text)
            except httpx.HTTPError:
                outcomes.append(False)
            n += 1

    async with httpx.AsyncClient(timeout=120) as client:
        await asyncio.gather(*(worker(i) for i in range(streams)))
    return outcomes


async def hot_swap_phase(
    supervisor: ReplicaSupervisor,
    new: Path,
    old: Path,
    streams: int,
    out_dir: Path,
    fleet: ProcessFleet,
) -> dict[str, float]:
    gateway = GatewayProcess(supervisor.urls, read_version(old).version_id, out_dir, fleet)
    gateway.launch()
    await gateway.wait_ready()
    try:
        stop = asyncio.Event()
        load = asyncio.create_task(chat_load(gateway.url, stop, streams))
        await asyncio.sleep(2)
        config = HotSwapConfig(gateway_url=gateway.url, admin_token=gateway.token)
        report = await publish_weights(new, old, supervisor.urls, config)
        await asyncio.sleep(2)
        stop.set()
        outcomes = await load
    finally:
        gateway.stop()
    return {
        "hotswap_s": report.seconds,
        "hotswap_replica_s_max": max(r.seconds for r in report.replicas),
        "hotswap_drain_s_max": max(r.drain_seconds for r in report.replicas),
        "hotswap_install_s_max": max(r.install_seconds for r in report.replicas),
        "hotswap_ok": float(report.ok),
        "hotswap_requests": float(len(outcomes)),
        "hotswap_failed_requests": float(outcomes.count(False)),
        "hotswap_probe_mean_abs_diff": max(
            r.probe.mean_abs_diff for r in report.replicas if r.probe is not None
        ),
    }


async def run(quick: bool, cache: Path, fleet: ProcessFleet) -> dict[str, Any]:
    plan = BenchPlan.for_mode(quick)
    out_dir = cache / "bench" / "serving"
    out_dir.mkdir(parents=True, exist_ok=True)
    base = ensure_demo_model(cache)
    log("training the swap's new weights (cached after the first run)")
    t0 = time.perf_counter()
    trained = ensure_trained(base, cache / "models" / "tiny-trained", QUICK_TRAINING)
    figures: dict[str, Any] = {"train_or_reuse_s": time.perf_counter() - t0}

    log("fp8 export and drift")
    export = await asyncio.to_thread(export_fp8, trained, cache / "models" / "fp8")
    figures.update({f"fp8_{k}": v for k, v in export.figures().items()})

    log("booting 2 vLLM CPU replicas")
    template = launch_config(
        "cpu-dev", model_dir=base, cache_dir=cache, served_model_name=LOCAL_MODEL_NAME
    )
    factory = functools.partial(vllm_replica_factory, fleet=fleet)
    supervisor = ReplicaSupervisor(template, SupervisorConfig(replicas=2), factory=factory)
    t0 = time.perf_counter()
    async with supervisor:
        figures["replica_boot_s"] = time.perf_counter() - t0
        figures["placement"] = [s.placement for s in supervisor.status()]
        replica = supervisor.urls[0]
        log("1 stream")
        single = await stream_phase(replica, 1, plan.single_requests, plan.max_tokens)
        log(f"{plan.concurrent_streams} streams")
        many = await stream_phase(
            replica, plan.concurrent_streams, plan.requests_per_stream, plan.max_tokens
        )
        figures.update({f"streams1_{k}": v for k, v in single.items()})
        figures.update({f"streams16_{k}": v for k, v in many.items()})
        log("hot-swap under load through the gateway")
        figures.update(
            await hot_swap_phase(supervisor, trained, base, plan.swap_load_streams, out_dir, fleet)
        )
    return {
        "bench": "serving",
        "quick": quick,
        "device": "cpu",
        "cores": len(os.sched_getaffinity(0)),
        "model": read_version(base).version_id,
        "swapped_to": read_version(trained).version_id,
        "max_tokens": plan.max_tokens,
        **figures,
    }


def main() -> int:
    """Run the benchmark; the last stdout line is the JSON report."""
    quick = os.environ.get("BENCH_QUICK", "") not in ("", "0")
    cache = Path(os.environ.get("SWITCHYARD_CACHE") or ".cache").resolve()
    # Entered before any thread or child exists: SIGTERM and SIGINT stop every child alike.
    with ProcessFleet() as fleet:
        try:
            report = asyncio.run(run(quick, cache, fleet))
        except Interrupted as stop:
            log(f"interrupted ({stop}): replicas and gateway stopped")
            return stop.exit_code
    (cache / "bench" / "serving" / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    for key in ("streams1_tok_s", "streams1_ttft_ms_p50", "streams16_tok_s", "hotswap_s"):
        log(f"{key}: {report[key]:.2f}")
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
