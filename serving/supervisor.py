"""Replica supervisor: keep N vLLM replicas serving on one machine, restarting crashed ones.

Placement (decided once per slot, kept across restarts, so the gateway's replica URL and the
replica's cores never change):

- Ports: slot i listens on `ports[i]` (free loopback ports picked at construction if none given).
- CPU: with C cores allowed to this process (`os.sched_getaffinity`) and N replicas, each slot
  gets k = max(1, C // N) cores, slot i the k allowed cores starting at position (i * k) mod C,
  passed as `VLLM_CPU_OMP_THREADS_BIND` (e.g. "0" and "1" for 2 replicas on 2 cores). Replicas
  therefore never share an OpenMP core unless N > C.
- GPU: a replica of W ranks (`world_size`: data x pipeline x tensor parallel) sees W devices
  through `CUDA_VISIBLE_DEVICES`: slot i the i-th contiguous run of W of the devices this process
  may use (a scheduler's assigned list is kept: "4,5" and "6,7" for 2 replicas of TP 2 on
  "4,5,6,7"); N x W above their count is refused (`gpu_devices`).

Each slot runs this loop until `stop()`:

    start process --wait_ready--> ready --(process exits, or /health failing for
    unhealthy_after_s)--> crashed --back-off--> start process ...

- Readiness is `VllmReplica.wait_ready` (`/health` 200, then `/v1/models` lists the model).
- Back-off after the n-th consecutive failure is `min(backoff_initial_s * 2**(n-1),
  backoff_max_s)`; a replica that stayed ready for `stable_after_s` resets the count. After
  `max_consecutive_failures` the slot is `failed` and left alone (its log tail is in status).
- A crash is not reported to the gateway: the gateway probes every replica's `/health` every
  0.5 s and stops routing to a dead one within a second; it routes to it again once it serves.

`status()` is a snapshot (state, pid, restarts, last exit code, last error, placement) of every
slot; `stop()` stops all processes (SIGTERM, then SIGKILL after `stop_grace_s`).

CLI: `python -m serving.supervisor --model DIR --replicas 2 [--preset cpu-dev] [--otlp-endpoint
URL]` runs until SIGTERM or SIGINT (Ctrl-C), printing the status as JSON lines (settings from
`serving/configs/<preset>.yaml`; `--otlp-endpoint` as `serving.launch`'s: vLLM's spans on);
either signal stops every replica (`serving.processes`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, Protocol

import httpx
from pydantic import BaseModel, ConfigDict, Field

from serving.launch import add_traces_argument, launch_config, preset_names, traces_override
from serving.processes import Interrupted, ProcessFleet
from serving.replica import ReplicaStartError, VllmReplica, find_free_port
from serving.vllm_config import CpuSettings, VllmLaunchConfig

SlotState = Literal["starting", "ready", "backoff", "failed", "stopped"]


class SupervisorConfig(BaseModel):
    """How many replicas, and how patiently they are started and restarted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replicas: int = Field(default=2, ge=1)
    ready_timeout_s: float = Field(default=300.0, gt=0, description="Per start attempt.")
    poll_interval_s: float = Field(default=0.5, gt=0, description="Liveness check period.")
    unhealthy_after_s: float | None = Field(
        default=30.0, gt=0, description="Restart a live replica whose /health fails this long."
    )
    backoff_initial_s: float = Field(default=1.0, gt=0)
    backoff_max_s: float = Field(default=60.0, gt=0)
    stable_after_s: float = Field(default=60.0, gt=0, description="Ready this long: reset.")
    max_consecutive_failures: int = Field(default=5, ge=1)
    stop_grace_s: float = Field(default=20.0, gt=0)


class ReplicaProcess(Protocol):
    """What the supervisor needs of a replica process (`VllmReplica` is one)."""

    @property
    def pid(self) -> int | None: ...
    @property
    def returncode(self) -> int | None: ...
    def start(self) -> None: ...
    async def wait_ready(self, timeout: float = ..., poll_interval: float = ...) -> None: ...  # noqa: ASYNC109
    def is_alive(self) -> bool: ...
    def stop(self, grace: float = ...) -> int | None: ...
    def log_tail(self, max_bytes: int = ...) -> str: ...


ReplicaFactory = Callable[[VllmLaunchConfig, Path, Mapping[str, str]], ReplicaProcess]


def vllm_replica_factory(
    config: VllmLaunchConfig,
    log_path: Path,
    env: Mapping[str, str],
    fleet: ProcessFleet | None = None,
) -> ReplicaProcess:
    """The default factory: a real vLLM server process (started through `fleet` if given)."""
    return VllmReplica(config, log_path=log_path, base_env=env, fleet=fleet)


def cpu_binding(index: int, replicas: int, allowed: Sequence[int]) -> str:
    """`VLLM_CPU_OMP_THREADS_BIND` of slot `index` (see the module docstring)."""
    cores = sorted(allowed)
    per_replica = max(1, len(cores) // replicas)
    start = (index * per_replica) % len(cores)
    return ",".join(str(cores[(start + j) % len(cores)]) for j in range(per_replica))


def backoff_delay(failures: int, config: SupervisorConfig) -> float:
    """Seconds to wait before the next start after `failures` consecutive failures (>= 1)."""
    return float(min(config.backoff_initial_s * 2 ** (failures - 1), config.backoff_max_s))


@dataclass
class SlotStatus:
    """One slot's state as of the snapshot."""

    index: int
    url: str
    state: SlotState
    placement: str
    pid: int | None = None
    starts: int = 0
    restarts: int = 0
    consecutive_failures: int = 0
    last_exit_code: int | None = None
    last_error: str | None = None
    ready_since: float | None = None


@dataclass
class _Slot:
    status: SlotStatus
    config: VllmLaunchConfig
    env: dict[str, str]
    log_path: Path
    replica: ReplicaProcess | None = None
    task: asyncio.Task[None] | None = None


class SupervisorError(Exception):
    """Replicas could not be brought up; the message holds the failing slot's log tail."""


class ReplicaSupervisor:
    """Runs `config.replicas` copies of `template` (ports and placement set per slot)."""

    def __init__(
        self,
        template: VllmLaunchConfig,
        config: SupervisorConfig,
        *,
        ports: Sequence[int] | None = None,
        factory: ReplicaFactory = vllm_replica_factory,
        base_env: Mapping[str, str] | None = None,
        allowed_cpus: Sequence[int] | None = None,
        gpu_count: int | None = None,
    ) -> None:
        if ports is not None and len(ports) != config.replicas:
            raise ValueError(f"{len(ports)} ports given for {config.replicas} replicas")
        self.config = config
        self._factory = factory
        self._stopping = False
        env = dict(os.environ if base_env is None else base_env)
        cpus = list(allowed_cpus) if allowed_cpus is not None else sorted(os.sched_getaffinity(0))
        self._slots: list[_Slot] = []
        for i in range(config.replicas):
            port = ports[i] if ports is not None else find_free_port(template.host)
            slot_env = dict(env)
            if template.device == "cpu":
                bind = cpu_binding(i, config.replicas, cpus)
                cpu = CpuSettings(
                    kvcache_space_gib=template.cpu.kvcache_space_gib, omp_threads_bind=bind
                )
                slot_config = template.model_copy(update={"port": port, "cpu": cpu})
                placement = f"cpu:{bind}"
            else:
                device = gpu_devices(i, config.replicas, env, gpu_count, template.world_size)
                slot_env["CUDA_VISIBLE_DEVICES"] = device
                slot_config = template.model_copy(update={"port": port})
                placement = f"cuda:{device}"
            log_path = template.cache_dir / "logs" / f"supervised-{port}.log"
            status = SlotStatus(i, slot_config.base_url, "stopped", placement)
            self._slots.append(_Slot(status, slot_config, slot_env, log_path))

    @property
    def urls(self) -> list[str]:
        """Base URLs of the slots, in order (stable across restarts)."""
        return [slot.status.url for slot in self._slots]

    def replica(self, index: int) -> ReplicaProcess | None:
        """The current process of slot `index` (None between attempts)."""
        return self._slots[index].replica

    def status(self) -> list[SlotStatus]:
        """A snapshot of every slot."""
        return [SlotStatus(**asdict(slot.status)) for slot in self._slots]

    async def start(self, *, wait: bool = True) -> None:
        """Start every slot's loop; with `wait`, return once all are ready at least once.

        Raises SupervisorError, after stopping every replica, if a slot fails for good first
        (or nothing is ready after `ready_timeout_s` times the failure budget)."""
        self._stopping = False
        for slot in self._slots:
            slot.task = asyncio.create_task(self._run_slot(slot), name=f"replica-{slot.status.url}")
        if wait:
            try:
                await self.wait_ready()
            except BaseException:
                await self.stop()
                raise

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Until every slot is ready (raises SupervisorError if one has failed for good)."""
        deadline = time.monotonic() + (
            timeout or self.config.ready_timeout_s * self.config.max_consecutive_failures
        )
        while not all(slot.status.state == "ready" for slot in self._slots):
            failed = [s for s in self._slots if s.status.state == "failed"]
            if failed:
                raise SupervisorError(
                    f"replica {failed[0].status.url} failed: {failed[0].status.last_error}"
                )
            if time.monotonic() > deadline:
                raise SupervisorError(f"replicas not ready: {self.status()}")
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        """Stop every slot's loop and process. Idempotent."""
        self._stopping = True
        for slot in self._slots:
            if slot.task is not None:
                slot.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await slot.task
                slot.task = None
        await asyncio.gather(*(self._stop_process(slot) for slot in self._slots))
        for slot in self._slots:
            slot.status.state = "stopped"

    async def __aenter__(self) -> ReplicaSupervisor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _stop_process(self, slot: _Slot) -> None:
        replica = slot.replica
        if replica is not None:
            code = await asyncio.to_thread(replica.stop, self.config.stop_grace_s)
            if code is not None:
                slot.status.last_exit_code = code

    async def _run_slot(self, slot: _Slot) -> None:
        status = slot.status
        while not self._stopping:
            status.state = "starting"
            slot.replica = self._factory(slot.config, slot.log_path, slot.env)
            slot.replica.start()
            status.pid, status.starts = slot.replica.pid, status.starts + 1
            if status.starts > 1:
                status.restarts += 1
            try:
                await slot.replica.wait_ready(self.config.ready_timeout_s)
            except ReplicaStartError as exc:
                status.last_error = str(exc)[-2000:]
                await self._stop_process(slot)
                await self._after_failure(slot)
                continue
            status.state, status.ready_since = "ready", time.monotonic()
            reason = await self._watch(slot)
            status.last_exit_code = slot.replica.returncode
            status.last_error = f"{reason}; log tail:\n{slot.replica.log_tail(2000)}"
            await self._stop_process(slot)
            if time.monotonic() - status.ready_since >= self.config.stable_after_s:
                status.consecutive_failures = 0
            status.ready_since = None
            await self._after_failure(slot)

    async def _after_failure(self, slot: _Slot) -> None:
        status = slot.status
        status.consecutive_failures += 1
        if status.consecutive_failures >= self.config.max_consecutive_failures:
            status.state = "failed"
            # Parked: nothing left to do until stop() cancels this task.
            await asyncio.Event().wait()
        status.state = "backoff"
        await asyncio.sleep(backoff_delay(status.consecutive_failures, self.config))

    async def _watch(self, slot: _Slot) -> str:
        """Return why a ready replica must be restarted."""
        replica = slot.replica
        assert replica is not None
        unhealthy_since: float | None = None
        async with httpx.AsyncClient(timeout=2.0) as client:
            while True:
                await asyncio.sleep(self.config.poll_interval_s)
                if not replica.is_alive():
                    return f"process exited with status {replica.returncode}"
                if self.config.unhealthy_after_s is None:
                    continue
                try:
                    healthy = (await client.get(f"{slot.status.url}/health")).status_code == 200
                except httpx.HTTPError:
                    healthy = False
                if healthy:
                    unhealthy_since = None
                    continue
                unhealthy_since = unhealthy_since or time.monotonic()
                if time.monotonic() - unhealthy_since >= self.config.unhealthy_after_s:
                    return f"/health failing for {self.config.unhealthy_after_s:.0f}s"


def gpu_devices(
    index: int,
    replicas: int,
    env: Mapping[str, str],
    gpu_count: int | None = None,
    per_replica: int = 1,
) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` of slot ``index``: the ``index``-th run of ``per_replica``
    consecutive devices (a replica's ``world_size``) among those this process may use (the list
    a scheduler assigned, else ``0..count-1``), comma-joined. More devices asked than there are
    is refused: two replicas on one GPU would each reserve ``gpu_memory_utilization`` of it."""
    assigned = env.get("CUDA_VISIBLE_DEVICES")
    if assigned is not None and assigned.strip():
        devices = [d.strip() for d in assigned.split(",") if d.strip()]
    else:
        devices = [str(d) for d in range(gpu_count or _cuda_device_count())]
    needed = replicas * per_replica
    if needed > len(devices):
        raise SupervisorError(
            f"{replicas} GPU replica(s) of {per_replica} device(s) each need {needed} devices,"
            f" and {len(devices)} are assigned ({', '.join(devices)}): one GPU serves one rank"
            " of one replica; run fewer replicas or smaller data/pipeline/tensor-parallel sizes"
        )
    return ",".join(devices[index * per_replica : (index + 1) * per_replica])


def _cuda_device_count() -> int:
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise SupervisorError("device='gpu' but no CUDA device is visible")
    return count


async def _run_forever(supervisor: ReplicaSupervisor, interval: float) -> None:
    async with supervisor:
        while True:
            print(json.dumps([asdict(s) for s in supervisor.status()]), flush=True)
            await asyncio.sleep(interval)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: supervise replicas of one checkpoint (settings from a launch preset) until SIGTERM
    or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.supervisor", description="Run and restart vLLM replicas."
    )
    parser.add_argument("--model", type=Path, required=True, help="Checkpoint directory.")
    parser.add_argument("--preset", choices=preset_names(), default="cpu-dev")
    parser.add_argument("--replicas", type=int, default=SupervisorConfig().replicas)
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache"))
    parser.add_argument("--port", type=int, action="append", help="One per replica.")
    parser.add_argument("--status-interval", type=float, default=10.0)
    add_traces_argument(parser)
    args = parser.parse_args(argv)
    template = launch_config(
        args.preset, model_dir=args.model, cache_dir=args.cache_dir, **traces_override(args)
    )
    # The supervisor stops its replicas as asyncio.run unwinds; the fleet also does, if not.
    with ProcessFleet() as fleet, contextlib.suppress(Interrupted):
        factory = functools.partial(vllm_replica_factory, fleet=fleet)
        config = SupervisorConfig(replicas=args.replicas)
        supervisor = ReplicaSupervisor(template, config, ports=args.port, factory=factory)
        asyncio.run(_run_forever(supervisor, args.status_interval))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
