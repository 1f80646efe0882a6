"""``switchyard serve --workers N``: N gateway processes on one listening socket, one per core.

The parent binds the socket once and starts N workers (``spawn``: each a fresh interpreter with
its own event loop), which accept connections on that same socket (the kernel hands each
connection to one of them). The parent serves nothing; it only:

- forwards SIGTERM and SIGINT to every worker: each stops accepting, lets its requests finish
  (up to ``limits.drain_timeout_s``, then ends them with an error and a record), flushes its
  record writer, and exits; the parent exits when they all have (exit status 0, or 1 if a
  worker failed). Each worker records its own exchanges once, with ids of its own, into the
  store they share (SQLite in WAL mode with a busy timeout, or PostgreSQL; a spool directory
  may be shared: segments are claimed with ``flock``), so nothing is recorded twice or lost;
- forwards SIGHUP to one worker, whose reload reaches every worker through the fleet;
- starts a worker again when one dies while the parent is not stopping.

Why more than one worker needs ``fleet.backend: redis``: the workers are separate processes,
and without a shared fleet each would hold its own drain flags, canary, reloads, prefix index
and budget view; a drain posted to one would not reach the others. So the default is one worker
per core when the config names a Redis fleet and one worker otherwise, and asking for more than
one without it is refused with that reason.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Final

from gateway.config import SwitchyardConfig

log = logging.getLogger("switchyard")

BACKLOG: Final = 4096
SUPERVISE_S: Final = 0.2
RESTART_PAUSE_S: Final = 1.0
STOP_GRACE_S: Final = 10.0  # past a worker's own stop deadline, before SIGKILL


class WorkersRefused(Exception):
    """``--workers`` asks for what the config cannot support; the message says what to set."""


def host_cores() -> int:
    return len(os.sched_getaffinity(0)) or 1


def resolve_workers(config: SwitchyardConfig, requested: int | None) -> int:
    """The worker count: ``requested``, or one per core with a Redis fleet (else one)."""
    if requested is None:
        return host_cores() if config.fleet.shared else 1
    if requested < 1:
        raise WorkersRefused(f"--workers must be at least 1, got {requested}")
    if requested > 1 and not config.fleet.shared:
        raise WorkersRefused(
            f"--workers {requested} needs shared state between the worker processes: set "
            "`fleet: {backend: redis, redis_url: redis://host:6379/0}` (each worker would "
            "otherwise keep its own drains, canary, reloads and budgets)"
        )
    if requested > 1 and config.auth.rate_limit_backend == "memory":
        log.warning(
            "%d workers with auth.rate_limit_backend: memory: each worker counts rpm/tpm on its "
            "own (set it to redis to share the limits)",
            requested,
        )
    return requested


def listen_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(BACKLOG)
    sock.set_inheritable(True)
    return sock


# A worker process's entry: the config file, the shared listening socket, the worker's index.
# A module-level function (the workers are spawned: the entry is pickled by reference).
WorkerEntry = Callable[[Path, socket.socket, int], None]


class Supervisor:
    """The parent of the workers (see the module docstring)."""

    def __init__(
        self,
        config_path: Path,
        sock: socket.socket,
        workers: int,
        stop_deadline_s: float,
        entry: WorkerEntry,
    ) -> None:
        self._entry = entry
        self._config_path = config_path
        self._sock = sock
        self._grace_s = stop_deadline_s + STOP_GRACE_S
        self._context = multiprocessing.get_context("spawn")
        self._workers: list[BaseProcess | None] = [None] * workers
        self._stopping = False
        self._reload = False

    def _start(self, index: int) -> None:
        process = self._context.Process(
            target=self._entry,
            args=(self._config_path, self._sock, index),
            name=f"switchyard-worker-{index}",
        )
        process.start()
        self._workers[index] = process
        log.info("worker %d started (pid %s)", index, process.pid)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _on_hup(self, signum: int, frame: FrameType | None) -> None:
        self._reload = True

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_hup)
        for index in range(len(self._workers)):
            self._start(index)
        while not self._stopping:
            time.sleep(SUPERVISE_S)
            if self._reload:
                self._reload = False
                self._signal_one(signal.SIGHUP)
            for index, process in enumerate(self._workers):
                if process is not None and not process.is_alive() and not self._stopping:
                    log.error("worker %d exited (%s); starting it again", index, process.exitcode)
                    time.sleep(RESTART_PAUSE_S)
                    self._start(index)
        return self._stop()

    def _signal_one(self, signum: int) -> None:
        for process in self._workers:
            if process is not None and process.is_alive() and process.pid is not None:
                os.kill(process.pid, signum)
                return

    def _stop(self) -> int:
        """SIGTERM to every worker, wait for their drains, SIGKILL what outlives the grace."""
        for process in self._workers:
            if process is not None and process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace_s
        failed = False
        for index, process in enumerate(self._workers):
            if process is None:
                continue
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                log.error("worker %d did not stop in time; killing it", index)
                process.kill()
                process.join()
            failed = failed or process.exitcode not in (0, -signal.SIGTERM)
        self._sock.close()
        log.info("all workers stopped")
        return 1 if failed else 0


def run_workers(
    config_path: Path,
    host: str,
    port: int,
    workers: int,
    stop_deadline_s: float,
    entry: WorkerEntry,
) -> int:
    """Bind ``host:port`` and supervise ``workers`` processes running ``entry`` (the gateway's
    :func:`gateway.serve.run_worker`) until SIGTERM; ``stop_deadline_s``: how long a worker may
    take to drain and stop (:func:`gateway.app.stop_deadline_s`)."""
    sock = listen_socket(host, port)
    bound = sock.getsockname()[1]
    log.info("switchyard listening on http://%s:%d with %d workers", host, bound, workers)
    return Supervisor(config_path, sock, workers, stop_deadline_s, entry).run()
