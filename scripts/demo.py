"""`make demo`: the whole front door on one machine, on embedded defaults.

1. Build the local model if missing (byte-level BPE tokenizer + tiny Qwen3-MoE, `serving.build`).
2. Start vLLM on the CPU serving it (`serving.replica`).
3. Start the frontier simulator, unless OPENAI_API_KEY / ANTHROPIC_API_KEY are set, in which
   case the frontier targets are the real providers.
4. Write the gateway config under `.cache/demo/` and start the gateway (SQLite traffic store).
5. Print a curl line and an `openai` SDK snippet, check that both paths answer, and wait.

This script is the one place that starts every part; the parts import nothing of each other
(README, "Architecture"). SIGTERM or SIGINT (Ctrl-C), at any step, stops every process it started
(vLLM with its engine core, the simulator, the gateway: `serving.processes.ProcessFleet`); so
does one of them exiting. `DEMO_SMOKE=1` exits after the check.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from serving.build import ensure_demo_model
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME
from serving.processes import ChildStartError, Interrupted, ProcessFleet
from serving.replica import VllmReplica
from serving.vllm_config import VllmLaunchConfig

REPO = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("SWITCHYARD_CACHE", REPO / ".cache"))
DEMO_DIR = Path(os.environ.get("SWITCHYARD_DEMO_DIR", CACHE / "demo"))
GATEWAY_PORT = int(os.environ.get("SWITCHYARD_PORT", "8080"))
VLLM_PORT = int(os.environ.get("SWITCHYARD_VLLM_PORT", "8000"))
SIM_PORT = int(os.environ.get("SWITCHYARD_SIM_PORT", "8901"))


def frontier_backends(sim_url: str) -> dict[str, Any]:
    """Real providers where a key is set, the simulator otherwise."""
    openai_real = bool(os.environ.get("OPENAI_API_KEY"))
    anthropic_real = bool(os.environ.get("ANTHROPIC_API_KEY"))
    return {
        "frontier-openai": {
            "kind": "litellm",
            "model": "openai/gpt-4o-mini",
            **({"api_key_env": "OPENAI_API_KEY"} if openai_real else {"api_base": sim_url + "/v1"}),
        },
        "frontier-anthropic": {
            "kind": "litellm",
            "model": "anthropic/claude-haiku-4-5",
            **({"api_key_env": "ANTHROPIC_API_KEY"} if anthropic_real else {"api_base": sim_url}),
        },
    }


def demo_config(vllm_url: str, sim_url: str) -> dict[str, Any]:
    return {
        "gateway": {"listen": {"host": "127.0.0.1", "port": GATEWAY_PORT}},
        "backends": {
            "local": {"kind": "vllm", "model": LOCAL_MODEL_NAME, "replicas": [vllm_url]},
            **frontier_backends(sim_url),
        },
        "routing": {
            "version": "demo-v1",
            # `auto` goes through the learned policy from the first request. With no evidence
            # yet (no scorer fitted; the RL loop writes state_file) that is the frontier: never
            # a blanket default to the untrained local model. No exploration share either (a
            # new user would get the untrained model's noise for one request in 20); the local
            # model answers a share of requests as shadows instead, off the user's path.
            "default": "frontier-openai",
            "aliases": {
                "auto": None,
                LOCAL_MODEL_NAME: "local",
                "gpt-4o-mini": "frontier-openai",
                "claude-haiku-4-5": "frontier-anthropic",
            },
            # Agent steps (requests with tools) are scored like any other request; an episode
            # whose local step breaks (an invalid tool call, an error streak) goes on at the
            # frontier for a few turns (`routing.episodes`, docs/agents.md).
            "rules": [
                {
                    "name": "long-context-to-frontier",
                    "match": {"min_prompt_tokens": 3000},
                    "target": "frontier-anthropic",
                },
            ],
            "fallbacks": {"local": ["frontier-openai"]},
            "learned": {
                "local_target": "local",
                "frontier_target": "frontier-openai",
                "exploration_share": 0.0,
                "state_file": str(DEMO_DIR / "learned_state.json"),
            },
        },
        "shadow": {"share": 0.25, "target": "local"},
        "store": {
            "url": f"sqlite:///{DEMO_DIR / 'traffic.db'}",
            "spool_dir": str(DEMO_DIR / "spool"),
        },
    }


ADMIN_TOKEN = os.environ.get(ADMIN_TOKEN_ENV) or secrets.token_urlsafe(24)
CHILD_ENV = {
    **os.environ,
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    ADMIN_TOKEN_ENV: ADMIN_TOKEN,
}


def create_key(base: str) -> str:
    """An API key for the demo user, through the admin API (shown once)."""
    resp = httpx.post(
        base + "/admin/keys",
        json={"name": "demo", "rpm_limit": 600},
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
        timeout=30,
    )
    resp.raise_for_status()
    return str(resp.json()["key"])


def check(base: str, key: str) -> None:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": "def fib(n):"}],
        "max_tokens": 16,
    }
    auth = {"Authorization": f"Bearer {key}"}

    def ask(model: str) -> httpx.Response:
        resp = httpx.post(
            base + "/v1/chat/completions", json={**body, "model": model}, headers=auth, timeout=60
        )
        resp.raise_for_status()
        return resp

    auto, local, frontier = ask("auto"), ask(LOCAL_MODEL_NAME), ask("gpt-4o-mini")
    print(
        f"  auto          -> {auto.headers['x-switchyard-target']} "
        f"({auto.headers['x-switchyard-route-reason']}), 200"
    )
    print(
        f"  local path    -> {local.headers['x-switchyard-target']} "
        f"({local.headers.get('x-switchyard-replica')}), 200"
    )
    print(f"  frontier path -> {frontier.headers['x-switchyard-target']}, 200")


def banner(base: str, key: str) -> None:
    print(f"""
Switchyard is up: {base}
API key (shown once): {key}
Admin token: {ADMIN_TOKEN}
  curl {base}/v1/chat/completions -H "Authorization: Bearer {key}" \\
    -H 'Content-Type: application/json' \\
    -d '{{"model": "auto", "messages": [{{"role": "user", "content": "def fib(n):"}}]}}'

  python - <<'PY'
from openai import OpenAI
client = OpenAI(base_url="{base}/v1", api_key="{key}")
r = client.chat.completions.with_raw_response.create(
    model="auto", messages=[{{"role": "user", "content": "Write a docstring"}}])
print(r.headers["x-switchyard-target"], r.parse().choices[0].message.content)
PY

Models: auto (the learned router decides: the frontier until the RL loop has fitted a scorer;
the local model answers a quarter of them as shadows, off your path), {LOCAL_MODEL_NAME} (vLLM),
gpt-4o-mini, claude-haiku-4-5.
Metrics: {base}/metrics   Traffic store: {DEMO_DIR / "traffic.db"}   Logs: {DEMO_DIR}/*.log
Ctrl-C (or SIGTERM) stops everything.""")


def start(fleet: ProcessFleet) -> None:
    """Steps 1-5; returns once both paths answered."""
    print("[1/4] local model: building if missing ...", flush=True)
    model_dir = ensure_demo_model(CACHE, progress=True)
    print(f"      {model_dir}")
    replica = VllmReplica(
        VllmLaunchConfig(
            model_dir=model_dir,
            cache_dir=CACHE,
            served_model_name=LOCAL_MODEL_NAME,
            port=VLLM_PORT,
            enforce_eager=True,
        ),
        log_path=DEMO_DIR / "vllm.log",
        fleet=fleet,
    )
    print("[2/4] vLLM (CPU) starting, about a minute ...", flush=True)
    replica.start()
    sim_url = f"http://127.0.0.1:{SIM_PORT}"
    if not (os.environ.get("OPENAI_API_KEY") and os.environ.get("ANTHROPIC_API_KEY")):
        print("[3/4] frontier simulator (no API keys set) ...", flush=True)
        sim_argv = [sys.executable, "-m", "loadtests.frontier_sim", "--port", str(SIM_PORT)]
        sim = fleet.spawn(
            sim_argv,
            name="frontier simulator",
            log_path=DEMO_DIR / "sim.log",
            env=CHILD_ENV,
            cwd=REPO,
        )
        fleet.wait_http(sim, sim_url + "/health", timeout_s=120)
    asyncio.run(replica.wait_ready(timeout=600))
    cfg_path = DEMO_DIR / "switchyard.yaml"
    cfg_path.write_text(yaml.safe_dump(demo_config(replica.base_url, sim_url), sort_keys=False))
    print(f"[4/4] gateway with {cfg_path} ...", flush=True)
    base = f"http://127.0.0.1:{GATEWAY_PORT}"
    gateway_argv = [sys.executable, "-m", "gateway", "--config", str(cfg_path)]
    gateway = fleet.spawn(
        gateway_argv, name="gateway", log_path=DEMO_DIR / "gateway.log", env=CHILD_ENV, cwd=REPO
    )
    fleet.wait_http(gateway, base + "/ready", timeout_s=120)
    key = create_key(base)
    check(base, key)
    banner(base, key)


def main() -> int:
    # First, before any thread or child exists: the fleet's signal handlers.
    with ProcessFleet() as fleet:
        DEMO_DIR.mkdir(parents=True, exist_ok=True)
        up = False
        try:
            start(fleet)
            up = True
            if os.environ.get("DEMO_SMOKE"):
                return 0
            child = fleet.wait_any()
        except Interrupted as stop:
            print("\nstopping ...", flush=True)
            return 0 if up else stop.exit_code
        except ChildStartError as exc:
            print(f"{exc}\n(logs: {DEMO_DIR}/*.log)", file=sys.stderr, flush=True)
            return 1
        print(
            f"{fleet.name(child)} exited with {child.returncode}; stopping the rest "
            f"(logs: {DEMO_DIR}/*.log)",
            file=sys.stderr,
            flush=True,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
