"""The agent workload through a real gateway whose local target breaks tool calls: the local
target is a simulator playing the agent with ``agent_invalid_call_rate``, the frontier one that
never breaks a call. Every turn after a broken local call goes to the frontier; no client request
fails."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from loadtests.agent.client import (
    AgentClientConfig,
    AgentRunStats,
    register_task,
    run_agent_client,
)
from loadtests.bench.sim_gateway import simulator_backends
from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from tasks.agent.tasks import sample_agent_tasks
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config


@pytest.fixture(scope="module")
def sims() -> Iterator[tuple[ThreadedSimulator, ThreadedSimulator]]:
    local = run_in_thread(SimulatorConfig(agent_invalid_call_rate=0.4, seed=3))
    frontier = run_in_thread(SimulatorConfig(agent_invalid_call_rate=0.0, seed=3))
    yield local, frontier
    local.stop()
    frontier.stop()


def _run(gw: GatewayThread, local: ThreadedSimulator, frontier: ThreadedSimulator) -> Any:
    config = AgentClientConfig(
        gateway=gw.base_url, oracle_url=local.base_url, episodes=8, seed=5, send_feedback=False
    )
    tasks = sample_agent_tasks(config.episodes, config.seed, config.split, config.kinds)

    async def go() -> AgentRunStats:
        async with aiohttp.ClientSession() as session:  # the frontier plays the same tasks
            for task in tasks:
                assert await register_task(session, frontier.base_url, task)
        return await run_agent_client(config, tasks)

    return asyncio.run(go())


@pytest.mark.slow
def test_agent_episodes_leave_a_local_model_that_breaks_calls_without_a_failed_request(
    sims: tuple[ThreadedSimulator, ThreadedSimulator],
) -> None:
    local, frontier = sims
    backends = simulator_backends(frontier.base_url)
    backends["local"] = {**backends["local"], "replicas": [local.base_url]}
    routing = {
        "default": "local",
        "aliases": {"auto": None},
        "fallbacks": {"local": ["frontier-openai"]},
    }
    gw = GatewayThread(gateway_config(frontier.base_url, backends=backends, routing=routing))
    gw.start()
    try:
        stats = _run(gw, local, frontier)
    finally:
        gw.stop()
    total = stats.report()["total"]
    assert total["failed_requests"] == 0
    assert {r.status for r in gw.sink.records} == {200}
    broken_local = 0
    for episode in stats.episodes:
        for step, after in zip(episode.steps, episode.steps[1:], strict=False):
            if step.target == "local" and any(c.status == "invalid" for c in step.calls):
                broken_local += 1
                assert after.target == "frontier-openai", episode.steps
    assert broken_local > 0  # the workload did exercise the fallback
    reasons = {r.policy_reason.split(" ")[0] for r in gw.sink.records if r.policy_reason}
    assert reasons == {"default", "episode_fallback:invalid_tool_call"}
