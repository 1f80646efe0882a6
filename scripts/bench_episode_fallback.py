"""In-episode fallback, measured: the agent workload through a gateway whose local model breaks
tool calls, with ``routing.episodes.fallback`` on and off (same tasks, seeds and mix).

    python scripts/bench_episode_fallback.py [--episodes 40] [--invalid-rate 0.3] [--seed 7]

Two frontier simulators play the agent (``loadtests/frontier_sim/agent_policy.py``): the one
behind the ``local`` target (a ``vllm``-kind target) breaks a call with probability
``--invalid-rate`` per step, the one behind ``frontier-openai`` never does. ``auto`` defaults to
``local``, which falls back to ``frontier-openai``. Each arm runs a fresh gateway process
(``python -m gateway``) and fresh simulators. Prints one line per arm, then one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from loadtests.agent.client import AgentClientConfig, register_task, run_agent_client
from loadtests.bench.sim_gateway import simulator_backends
from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from serving.processes import ProcessFleet
from tasks.agent.tasks import sample_agent_tasks

SIM_SEED = 1
READY_TIMEOUT_S = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def gateway_config(local_url: str, frontier_url: str, port: int, fallback: bool) -> dict[str, Any]:
    backends = simulator_backends(frontier_url)
    backends["local"] = {**backends["local"], "replicas": [local_url]}
    return {
        "gateway": {"listen": {"host": "127.0.0.1", "port": port}},
        "backends": backends,
        "routing": {
            "default": "local",
            "aliases": {"auto": None},
            "fallbacks": {"local": ["frontier-openai"]},
            "episodes": {"fallback": fallback},
        },
        "store": {"enabled": False},
        "auth": {"required": False},
    }


def run_arm(args: argparse.Namespace, fallback: bool, work: Path) -> dict[str, Any]:
    local = run_in_thread(SimulatorConfig(agent_invalid_call_rate=args.invalid_rate, seed=SIM_SEED))
    frontier = run_in_thread(SimulatorConfig(agent_invalid_call_rate=0.0, seed=SIM_SEED))
    port = _free_port()
    config = work / f"gateway-{'on' if fallback else 'off'}.yaml"
    config.write_text(json.dumps(gateway_config(local.base_url, frontier.base_url, port, fallback)))
    try:
        with ProcessFleet() as fleet:
            child = fleet.spawn(
                [sys.executable, "-m", "gateway", "--config", str(config)],
                name="gateway",
                log_path=work / f"{config.stem}.log",
            )
            base = f"http://127.0.0.1:{port}"
            fleet.wait_http(child, base + "/ready", READY_TIMEOUT_S)
            client = AgentClientConfig(
                gateway=base,
                oracle_url=local.base_url,
                episodes=args.episodes,
                seed=args.seed,
                send_feedback=False,
            )
            tasks = sample_agent_tasks(client.episodes, client.seed, client.split, client.kinds)

            async def go() -> Any:
                async with aiohttp.ClientSession() as session:  # the frontier plays them too
                    for task in tasks:
                        await register_task(session, frontier.base_url, task)
                return await run_agent_client(client, tasks)

            stats = asyncio.run(go())
    finally:
        local.stop()
        frontier.stop()
    total: dict[str, Any] = stats.report()["total"]
    return {"fallback": fallback, **total, "wall_s": round(stats.wall_s, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--invalid-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=7, help="seeds the task draw")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        arms = [run_arm(args, fallback, Path(tmp)) for fallback in (True, False)]
    for arm in arms:
        print(
            f"fallback={'on ' if arm['fallback'] else 'off'} success={arm['success_rate']:.3f} "
            f"steps/success={arm['steps_per_success']:.2f} "
            f"validity={arm['tool_call_validity']:.3f} targets={arm['steps_by_target']} "
            f"failed_requests={arm['failed_requests']}"
        )
    print(json.dumps({"invalid_rate": args.invalid_rate, "seed": args.seed, "arms": arms}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
