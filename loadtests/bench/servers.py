"""Servers under test as subprocesses: free loopback ports, readiness, and certain teardown.

Each server runs in its own session (process group), so a Ctrl-C at the terminal reaches only
the benchmark, whose ``finally`` then stops every group it started: SIGTERM, a grace period,
SIGKILL. :class:`ServerFleet` is the context manager that owns them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

LOOPBACK = "127.0.0.1"
READY_POLL_S = 0.25
STOP_GRACE_S = 10.0


class ServerStartError(RuntimeError):
    """A server exited or did not answer its readiness URL in time; the message has its log."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(slots=True)
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    ready_path: str
    spawned_at: float  # time.monotonic() when started

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def is_ready(self, headers: Mapping[str, str] | None = None) -> bool:
        request = urllib.request.Request(
            self.base_url + self.ready_path, headers=dict(headers or {})
        )
        try:
            with urllib.request.urlopen(request, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(STOP_GRACE_S)
        # Children that outlived their leader (uvicorn workers) share its group.
        _signal_group(self.process.pid, signal.SIGKILL)
        self.log_file.close()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ServerFleet:
    """Starts servers and stops all of them on exit, whatever the exit (Ctrl-C included)."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.servers: list[Server] = []

    def __enter__(self) -> ServerFleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_all()

    def stop_all(self) -> None:
        while self.servers:
            self.servers.pop().stop()

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
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            list(argv),
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        server = Server(name, port, process, log_path, log_file, ready_path, time.monotonic())
        self.servers.append(server)
        return server

    def wait_ready(
        self, server: Server, timeout_s: float, headers: Mapping[str, str] | None = None
    ) -> float:
        """Seconds from spawn until ``ready_path`` answered 200; ``ServerStartError`` otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise ServerStartError(
                    f"{server.name} exited with {server.process.returncode}:\n{server.log_tail()}"
                )
            if server.is_ready(headers):
                return time.monotonic() - server.spawned_at
            time.sleep(READY_POLL_S)
        raise ServerStartError(
            f"{server.name} not ready after {timeout_s:.0f}s on {server.base_url}"
            f"{server.ready_path}:\n{server.log_tail()}"
        )

    def remove(self, server: Server) -> None:
        """Stop one server now (e.g. one that failed to start)."""
        if server in self.servers:
            self.servers.remove(server)
        server.stop()
