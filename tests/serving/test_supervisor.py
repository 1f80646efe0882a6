"""Replica supervisor: placement, restart with back-off, clean stop, and what the gateway sees.

The replicas here are real processes that speak vLLM's HTTP surface (`/health`, `/v1/models`,
OpenAI chat completions): the frontier simulator started as a subprocess. The supervisor on
real vLLM replicas is exercised by test_hotswap.py.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

import httpx
import pytest

from gateway.config import parse_config
from serving.names import LOCAL_MODEL_NAME
from serving.replica import VllmReplica
from serving.supervisor import (
    ReplicaProcess,
    ReplicaSupervisor,
    SupervisorConfig,
    SupervisorError,
    backoff_delay,
    cpu_binding,
    gpu_devices,
)
from serving.vllm_config import VllmLaunchConfig
from tests.fixtures.gateway_fixture import GatewayThread

FAST = SupervisorConfig(
    replicas=2,
    ready_timeout_s=30,
    poll_interval_s=0.05,
    backoff_initial_s=0.05,
    backoff_max_s=0.2,
    stop_grace_s=5,
)


class SimReplica(VllmReplica):
    """A VllmReplica whose process is the frontier simulator serving `LOCAL_MODEL_NAME`."""

    command: list[str] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.command or [
            sys.executable,
            "-m",
            "loadtests.frontier_sim",
            "--host",
            self.config.host,
            "--port",
            str(self.config.port),
            "--models",
            LOCAL_MODEL_NAME,
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )


def sim_factory(config: VllmLaunchConfig, log: Path, env: Mapping[str, str]) -> ReplicaProcess:
    return SimReplica(config, log_path=log, base_env=env)


def crashing_factory(config: VllmLaunchConfig, log: Path, env: Mapping[str, str]) -> ReplicaProcess:
    replica = SimReplica(config, log_path=log, base_env=env)
    replica.command = [sys.executable, "-c", "import sys; print('no GPU here'); sys.exit(3)"]
    return replica


def template(tmp_path: Path) -> VllmLaunchConfig:
    return VllmLaunchConfig(
        model_dir=tmp_path / "model", cache_dir=tmp_path, served_model_name=LOCAL_MODEL_NAME
    )


@pytest.fixture
async def supervisor(tmp_path: Path) -> AsyncIterator[ReplicaSupervisor]:
    sup = ReplicaSupervisor(template(tmp_path), FAST, factory=sim_factory, allowed_cpus=[0, 1])
    await sup.start()
    try:
        yield sup
    finally:
        await sup.stop()


async def wait_until(predicate: Callable[[], bool], within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def test_cpu_binding_gives_each_replica_its_own_cores() -> None:
    assert [cpu_binding(i, 2, [0, 1]) for i in range(2)] == ["0", "1"]
    assert cpu_binding(0, 1, [0, 1]) == "0,1"
    assert [cpu_binding(i, 2, [0, 1, 2, 3]) for i in range(2)] == ["0,1", "2,3"]
    assert [cpu_binding(i, 3, [4, 5]) for i in range(3)] == ["4", "5", "4"]  # N > C: shared


def test_backoff_doubles_up_to_its_cap() -> None:
    config = SupervisorConfig(backoff_initial_s=1, backoff_max_s=5)
    assert [backoff_delay(n, config) for n in range(1, 6)] == [1, 2, 4, 5, 5]


def test_ports_must_match_the_replica_count(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2 ports given for 3 replicas"):
        ReplicaSupervisor(template(tmp_path), SupervisorConfig(replicas=3), ports=[1, 2])


async def test_replicas_start_ready_on_distinct_ports_and_cores(
    supervisor: ReplicaSupervisor,
) -> None:
    status = supervisor.status()
    assert [s.state for s in status] == ["ready", "ready"]
    assert [s.placement for s in status] == ["cpu:0", "cpu:1"]
    assert len({s.url for s in status}) == 2
    async with httpx.AsyncClient(timeout=5) as client:
        for url in supervisor.urls:
            assert (await client.get(f"{url}/health")).status_code == 200
    status[0].state = "failed"  # a snapshot: changing it changes nothing
    assert supervisor.status()[0].state == "ready"


async def test_a_crashed_replica_is_restarted_on_the_same_url(
    supervisor: ReplicaSupervisor,
) -> None:
    before = supervisor.status()
    victim = supervisor.replica(0)
    assert victim is not None and victim.pid is not None
    os.killpg(victim.pid, signal.SIGKILL)
    await wait_until(lambda: supervisor.status()[0].restarts == 1)
    await wait_until(lambda: supervisor.status()[0].state == "ready")
    after = supervisor.status()
    assert after[0].url == before[0].url and after[0].pid != before[0].pid
    assert after[0].last_exit_code == -signal.SIGKILL
    assert "process exited" in (after[0].last_error or "")
    assert after[1].pid == before[1].pid and after[1].restarts == 0


async def test_stop_ends_every_process(tmp_path: Path) -> None:
    sup = ReplicaSupervisor(template(tmp_path), FAST, factory=sim_factory, allowed_cpus=[0])
    await sup.start()
    processes = [sup.replica(i) for i in range(2)]
    await sup.stop()
    assert all(p is not None and not p.is_alive() for p in processes)
    assert [s.state for s in sup.status()] == ["stopped", "stopped"]
    await sup.stop()  # idempotent


async def test_a_replica_that_never_starts_fails_after_its_budget(tmp_path: Path) -> None:
    config = FAST.model_copy(update={"replicas": 1, "max_consecutive_failures": 3})
    sup = ReplicaSupervisor(template(tmp_path), config, factory=crashing_factory)
    try:
        with pytest.raises(SupervisorError, match="no GPU here"):
            await sup.start()
        status = sup.status()[0]
        assert status.state == "stopped" and status.starts == 3 and status.restarts == 2
        assert status.last_exit_code == 3
    finally:
        await sup.stop()


async def test_gateway_stops_routing_to_a_killed_replica_within_a_second(
    tmp_path: Path,
) -> None:
    # The restart waits 3 s here, so the gateway's probe (every 0.5 s) sees the replica down.
    slow_restart = FAST.model_copy(update={"backoff_initial_s": 3.0, "backoff_max_s": 3.0})
    supervisor = ReplicaSupervisor(
        template(tmp_path), slow_restart, factory=sim_factory, allowed_cpus=[0, 1]
    )
    await supervisor.start()
    config = parse_config(
        {
            "backends": {
                "local": {"kind": "vllm", "model": LOCAL_MODEL_NAME, "replicas": supervisor.urls}
            },
            "routing": {"default": "local", "aliases": {LOCAL_MODEL_NAME: "local"}},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    gw = GatewayThread(config).start()
    try:
        victim = supervisor.replica(1)
        assert victim is not None and victim.pid is not None
        os.killpg(victim.pid, signal.SIGKILL)
        pool = gw.state.targets.pools()["local"]
        dead = supervisor.urls[1]
        await wait_until(lambda: not pool.replicas[dead].healthy, within_s=3)
        async with httpx.AsyncClient(base_url=gw.base_url, timeout=10) as client:
            served = []
            for n in range(10):
                response = await client.post(
                    "/v1/chat/completions",
                    json={
                        "model": LOCAL_MODEL_NAME,
                        "messages": [{"role": "user", "content": f"q{n}"}],
                    },
                )
                assert response.status_code == 200, response.text
                served.append(response.headers["x-switchyard-replica"])
        assert dead not in served
        # Restarted by the supervisor: the gateway's probe brings it back into rotation.
        await wait_until(lambda: pool.replicas[dead].healthy, within_s=20)
    finally:
        gw.stop()
        await supervisor.stop()


def test_gpu_replicas_take_the_assigned_devices_one_each() -> None:
    """A scheduler's CUDA_VISIBLE_DEVICES list is kept (slot i gets its i-th entry), and more
    replicas than devices is refused instead of doubling up on one GPU."""
    assigned = {"CUDA_VISIBLE_DEVICES": "3,5"}
    assert [gpu_devices(i, 2, assigned) for i in range(2)] == ["3", "5"]
    assert [gpu_devices(i, 2, {}, gpu_count=2) for i in range(2)] == ["0", "1"]
    with pytest.raises(SupervisorError, match=r"3 GPU replica\(s\) of 1 device\(s\) each need 3"):
        gpu_devices(2, 3, assigned)
    with pytest.raises(SupervisorError, match="one GPU serves one rank of one replica"):
        gpu_devices(1, 2, {}, gpu_count=1)


def test_a_parallel_gpu_replica_takes_a_contiguous_run_of_its_world_size() -> None:
    assigned = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert [gpu_devices(i, 2, assigned, per_replica=2) for i in range(2)] == ["4,5", "6,7"]
    assert gpu_devices(0, 1, assigned, per_replica=4) == "4,5,6,7"
    with pytest.raises(SupervisorError, match="need 8 devices, and 4 are assigned"):
        gpu_devices(0, 2, assigned, per_replica=4)


def test_supervisor_places_tensor_parallel_replicas(tmp_path: Path) -> None:
    config = SupervisorConfig(replicas=2)
    gpu = template(tmp_path).model_validate(
        {**template(tmp_path).model_dump(), "device": "gpu", "tensor_parallel_size": 2}
    )
    placed = ReplicaSupervisor(
        gpu, config, ports=[1, 2], base_env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    )
    assert [s.placement for s in placed.status()] == ["cuda:0,1", "cuda:2,3"]
    with pytest.raises(SupervisorError, match="need 4 devices, and 2 are assigned"):
        ReplicaSupervisor(gpu, config, ports=[1, 2], base_env={"CUDA_VISIBLE_DEVICES": "0,1"})
