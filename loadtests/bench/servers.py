"""Servers under test as subprocesses: free loopback ports, readiness, and certain teardown.

:class:`ServerFleet` names each server, gives it a port and a log file, and leaves the rest to
:class:`serving.processes.ProcessFleet`: each server leads its own process group, every group is
stopped when the fleet's block ends (SIGTERM, a grace period, SIGKILL), and SIGTERM or SIGINT
inside the block raises ``Interrupted`` (a ``KeyboardInterrupt``) so that the block ends.

Time to ready is spawn -> first 200 from the ready path, asked every ``poll_s`` (10 ms in the
gateway benchmark, so the figure resolves well below the 2 s it is compared with). Memory is
read from ``/proc/<pid>/status``: ``VmRSS`` (resident now) and ``VmHWM`` (its peak).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from serving.processes import Child, ChildStartError, ProcessFleet, http_ok

LOOPBACK = "127.0.0.1"
STOP_GRACE_S = 10.0
READY_POLL_S = 0.25  # bench_kv's replicas take minutes: no need to ask more often

ServerStartError = ChildStartError  # a server exited or did not answer in time (with its log)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True, slots=True)
class Memory:
    """In MiB (the kernel's kB are KiB); the targets' "MB" are these."""

    rss_mb: float  # VmRSS
    peak_rss_mb: float  # VmHWM


def process_memory(pid: int) -> Memory | None:
    """Resident and peak resident memory of one process (not its children); None if gone."""
    fields: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM"):
                    fields[name] = int(value.split()[0]) / 1024  # kB -> MiB
    except (OSError, ValueError, IndexError):
        return None
    if len(fields) != 2:
        return None
    return Memory(rss_mb=fields["VmRSS"], peak_rss_mb=fields["VmHWM"])


@dataclass(slots=True)
class Server:
    name: str
    port: int
    process: Child
    log_path: Path
    ready_path: str
    spawned_at: float  # time.monotonic() when started

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def is_ready(self, headers: Mapping[str, str] | None = None) -> bool:
        return http_ok(self.base_url + self.ready_path, headers)


class ServerFleet:
    """Starts servers and stops all of them on exit, whatever the exit (a signal included)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: list[Server] = []
        self.processes = ProcessFleet(grace_s=STOP_GRACE_S)

    def __enter__(self) -> ServerFleet:
        self.processes.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.servers.clear()
        self.processes.__exit__(exc_type, exc, tb)

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        ready_path: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Server:
        """Start ``argv`` (it must listen on ``port``); call :meth:`wait_ready` next."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        log_path.write_bytes(b"")
        spawned_at = time.monotonic()  # before the fork: time to ready counts from here
        process = self.processes.spawn(
            argv, name=name, log_path=log_path, env={**os.environ, **(env or {})}, cwd=cwd
        )
        server = Server(name, port, process, log_path, ready_path, spawned_at)
        self.servers.append(server)
        return server

    def wait_ready(
        self,
        server: Server,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        poll_s: float = READY_POLL_S,
    ) -> float:
        """Seconds from spawn until ``ready_path`` answered 200, asked every ``poll_s``;
        ``ServerStartError`` (with the log's tail) if the server exits first or time runs out."""
        url = server.base_url + server.ready_path
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise ServerStartError(
                    f"{server.name} exited with {server.process.returncode}:\n{server.log_tail()}"
                )
            if http_ok(url, headers):
                return time.monotonic() - server.spawned_at
            time.sleep(poll_s)
        raise ServerStartError(
            f"{server.name} not ready after {timeout_s:.0f}s at {url}:\n{server.log_tail()}"
        )

    def remove(self, server: Server) -> None:
        """Stop one server now (e.g. one that failed to start)."""
        if server in self.servers:
            self.servers.remove(server)
        self.processes.stop(server.process)
