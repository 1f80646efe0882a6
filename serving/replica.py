"""One vLLM server process: start it, wait until it serves, stop it.

Lifecycle of a `VllmReplica`:

    created --start()--> starting --wait_ready()--> ready --stop()--> stopped
                             \\--(process exits or timeout)--> ReplicaStartError

- `start()` launches `config.command()` with `config.environment(os.environ)` in its own
  process group (so stopping it also stops vLLM's engine-core and worker children), stdout and
  stderr appended to one log file; through `fleet` when one is given (`serving.processes`), so
  the process that started it stops it on SIGTERM and SIGINT too.
- `wait_ready(timeout)` polls `GET /health` until 200, then `GET /v1/models` until it lists the
  served model name, then sends one warm-up completion that asks for logprobs (`WARM_UP`). It
  fails fast, with the tail of the log, as soon as the process exits.
- `stop(grace)` sends SIGTERM to the group, then SIGKILL after `grace` seconds
  (`serving.processes.stop_groups`).

A replica holds no restart policy: a supervisor over several replicas owns that and uses
`is_alive()`, `returncode` and `log_tail()` to decide.

Errors: `ReplicaError` is the base; `ReplicaStartError` (the process died or never became
ready) is the only one raised here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from serving.processes import Child, ProcessFleet, start_group, stop_groups
from serving.vllm_config import VllmLaunchConfig

log = logging.getLogger(__name__)

_LOG_TAIL_BYTES = 8_000
# vLLM compiles its sampler's logprobs op (`batched_count_greater_than`, torch.compile) lazily,
# inside the engine step of the first request that asks for logprobs, and every request in the
# engine waits for it: a g++ build on CPU, a Triton build on a GPU (docs/deploy.md, "vLLM replica
# start-up"). One such request before the replica counts as ready pays it at start-up instead of
# a client. (Eager CPU replicas skip torch.compile outright, `VllmLaunchConfig.environment`;
# this covers the others.)
WARM_UP = {"prompt": "warm up", "max_tokens": 1, "logprobs": 1}


class ReplicaError(Exception):
    """Base of the errors a vLLM replica raises."""


class ReplicaStartError(ReplicaError):
    """The replica exited or did not become ready in time; the message holds the log tail."""


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class VllmReplica:
    """A single vLLM OpenAI-compatible server process described by a `VllmLaunchConfig`."""

    def __init__(
        self,
        config: VllmLaunchConfig,
        *,
        log_path: Path | None = None,
        base_env: Mapping[str, str] | None = None,
        fleet: ProcessFleet | None = None,
    ) -> None:
        """`log_path` defaults to `<cache_dir>/logs/vllm-<served name>-<port>.log`;
        `base_env` defaults to this process's environment; `fleet`, if given, starts the
        process (and stops it when its block ends, if `stop()` was not called first)."""
        self.config = config
        self.log_path = log_path or (
            config.cache_dir / "logs" / f"vllm-{config.served_model_name}-{config.port}.log"
        )
        self._base_env = base_env
        self._fleet = fleet
        self._process: Child | None = None

    @property
    def base_url(self) -> str:
        """`http://host:port` (append `/v1` for the OpenAI API)."""
        return self.config.base_url

    @property
    def pid(self) -> int | None:
        """Process id of the server (its process group id too), once started."""
        return self._process.pid if self._process is not None else None

    @property
    def returncode(self) -> int | None:
        """Exit status once the process has exited, else None."""
        return self._process.poll() if self._process is not None else None

    def is_alive(self) -> bool:
        """True while the started process has not exited."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Launch the server; returns at once. Raises ReplicaError if already running."""
        if self.is_alive():
            raise ReplicaError(f"replica on {self.base_url} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = self.config.environment(os.environ if self._base_env is None else self._base_env)
        with self.log_path.open("ab") as log:
            log.write(f"\n=== start {time.strftime('%Y-%m-%dT%H:%M:%S')} ===\n".encode())
        command = self.config.command()
        if self._fleet is None:
            self._process = start_group(command, log_path=self.log_path, env=env)
        else:
            name = f"vLLM {self.base_url}"
            self._process = self._fleet.spawn(command, name=name, log_path=self.log_path, env=env)

    # A caller-side asyncio.timeout could not put the log tail into the error, hence `timeout`.
    async def wait_ready(self, timeout: float = 300.0, poll_interval: float = 0.5) -> None:  # noqa: ASYNC109
        """Return once `/health` answers 200 and `/v1/models` lists the served model, after
        one warm-up completion that asks for logprobs (`WARM_UP`; its failure is only logged).

        Raises ReplicaStartError (with the log tail) if the process exits first, or if it is
        not ready within `timeout` seconds (the process is left running; call `stop()`).
        """
        if self._process is None:
            raise ReplicaError("wait_ready() called before start()")
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(base_url=self.base_url, timeout=5.0) as client:
            for path in ("/health", "/v1/models"):
                while not await self._probe(client, path):
                    if not self.is_alive():
                        raise ReplicaStartError(
                            f"vLLM exited with status {self.returncode} before it was ready "
                            f"(log {self.log_path}):\n{self.log_tail()}"
                        )
                    if time.monotonic() > deadline:
                        raise ReplicaStartError(
                            f"vLLM on {self.base_url} not ready after {timeout:.0f}s "
                            f"(waiting for {path}; log {self.log_path}):\n{self.log_tail()}"
                        )
                    await asyncio.sleep(poll_interval)
            await self._warm_up(client, max(deadline - time.monotonic(), poll_interval))

    async def _warm_up(self, client: httpx.AsyncClient, timeout_s: float) -> None:
        """The `WARM_UP` completion; a failure is logged, not raised: the replica serves."""
        body = {"model": self.config.served_model_name, **WARM_UP}
        try:
            response = await client.post("/v1/completions", json=body, timeout=timeout_s)
        except httpx.HTTPError as exc:
            log.warning("vLLM on %s: warm-up request failed: %s", self.base_url, exc)
            return
        if response.status_code != 200:
            log.warning(
                "vLLM on %s: warm-up request answered %d: %s",
                self.base_url,
                response.status_code,
                response.text[:500],
            )

    async def _probe(self, client: httpx.AsyncClient, path: str) -> bool:
        try:
            response = await client.get(path)
        except httpx.TransportError:
            return False
        if response.status_code != 200:
            return False
        if path != "/v1/models":
            return True
        served = {model.get("id") for model in response.json().get("data", [])}
        return self.config.served_model_name in served

    def stop(self, grace: float = 20.0) -> int | None:
        """Stop the process group: SIGTERM, then SIGKILL after `grace` seconds.

        Idempotent; returns the exit status (None if never started).
        """
        process = self._process
        if process is None:
            return None
        # Also when the leader exited on its own: its children (engine core, workers) may not.
        stop_groups([process], grace)
        return process.returncode

    def log_tail(self, max_bytes: int = _LOG_TAIL_BYTES) -> str:
        """The last `max_bytes` of the log file, decoded leniently ('' if there is none)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - max_bytes))
                return log.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
