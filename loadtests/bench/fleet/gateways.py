"""The processes of ``make bench-fleet`` (:mod:`loadtests.bench.fleet.run`): simulated replicas,
gateways on a Redis fleet, and what the benchmark asks of them over HTTP."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtests.bench.gateway.settings import FRONTIER_ANTHROPIC_MODEL
from loadtests.bench.gateway.systems import FRONTIER_DUMMY_KEY, FRONTIER_KEY_ENV
from loadtests.bench.servers import Server, ServerFleet, free_port
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME

ROOT = Path(__file__).resolve().parents[3]
ADMIN_TOKEN = "bench-fleet"
ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    ADMIN_TOKEN_ENV: ADMIN_TOKEN,
    FRONTIER_KEY_ENV: FRONTIER_DUMMY_KEY,
}
ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}


def spawn_sim(servers: ServerFleet, name: str) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "loadtests.frontier_sim", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--answer-tokens", "16", "--tokens-per-s", "0", "--ttft-ms", "0"]
    return servers.spawn(name, argv, port, "/health", env=ENV, cwd=ROOT)


def gateway_config(
    port: int,
    replicas: Sequence[str],
    fleet: str,
    redis_url: str,
    tokenizer: Path | None,
    translated: bool = False,
) -> dict[str, Any]:
    local: dict[str, Any] = {"kind": "vllm", "model": "sim-local", "replicas": list(replicas)}
    if translated:  # chat -> Anthropic format: litellm translates both ways
        model = f"anthropic/{FRONTIER_ANTHROPIC_MODEL}"
        local = {"kind": "litellm", "model": model, "api_key_env": FRONTIER_KEY_ENV}
        local["api_base"] = replicas[0]
    if tokenizer is not None:
        local["tokenizer_dir"] = str(tokenizer)
        local["replica_selector"] = {"kind": "cache_aware", "block_size": 32}
    return {
        "gateway": {"listen": {"host": "127.0.0.1", "port": port}},
        "backends": {"local": local},
        "routing": {"default": "local", "aliases": {LOCAL_MODEL_NAME: "local", "auto": None}},
        "store": {"enabled": False},
        "auth": {"required": False},
        "fleet": {"backend": "redis", "redis_url": redis_url, "name": fleet},
    }


def spawn_gateway(
    servers: ServerFleet, name: str, config: dict[str, Any], work: Path, workers: int
) -> tuple[Server, Path]:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    port = config["gateway"]["listen"]["port"]
    argv = [sys.executable, "-m", "gateway", "--config", str(path), "--workers", str(workers)]
    return servers.spawn(name, argv, port, "/ready", env=ENV, cwd=ROOT), path


def wait_members(url: str, n: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(httpx.get(url + "/admin/fleet", headers=ADMIN, timeout=10).json()["members"]) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url}: fewer than {n} fleet members after {timeout_s}s")
        time.sleep(0.05)


def drop_fleet_keys(redis_url: str, name: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=f"{name}:*"))
    if keys:
        client.delete(*keys)
    client.close()
