"""Weight hot-swaps started from the console: the RL loop's own command, run and followed.

A swap is ``python -m rl_loop.promote publish --checkpoint DIR ...`` (or ``rollback``), the one
implementation of promotion and rollback: ``serving.hotswap`` drains, reloads, probes and
undrains each replica in turn, rolls back by itself when a probe fails, and the command records
the outcome in the model registry (``model_version``). The gateway may not import the RL loop
(tests/test_architecture.py), so it runs the command as an operator would, as a child process
with the admin token in its environment; the child drains and undrains each replica through this
gateway's admin API.

Progress is what this gateway sees: each replica's drain flag and weights version (changed by
those admin calls, so a page polling it shows the swap move replica by replica), the elapsed
time and the child's output. One swap at a time; a second is refused while one runs. At shutdown
a running swap is terminated (its replicas keep whatever the last completed step left; the
hot-swap never leaves one serving unknown weights).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from gateway.errors import InvalidRequestError

log = logging.getLogger(__name__)

OUTPUT_LINES: Final = 200  # of the child's output kept for the page
STOP_GRACE_S: Final = 10.0

SwapKind = Literal["publish", "rollback"]


def promote_command(
    kind: SwapKind,
    *,
    store_url: str,
    gateway_url: str,
    target: str,
    replicas: Sequence[str],
    checkpoint: str | None = None,
) -> list[str]:
    """The ``rl_loop.promote`` command line of a swap."""
    command = [sys.executable, "-m", "rl_loop.promote", kind, "--store", store_url]
    command += ["--gateway", gateway_url, "--target", target]
    for replica in replicas:
        command += ["--replica", replica]
    if checkpoint is not None:
        command += ["--checkpoint", checkpoint]
    return command


@dataclass
class SwapJob:
    kind: SwapKind
    operator: str
    target: str
    replicas: list[str]
    command: list[str]
    checkpoint: str | None = None  # the version id published (None: a rollback)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    returncode: int | None = None
    output: deque[str] = field(default_factory=lambda: deque(maxlen=OUTPUT_LINES))

    @property
    def running(self) -> bool:
        return self.returncode is None

    @property
    def state(self) -> Literal["running", "succeeded", "failed"]:
        if self.returncode is None:
            return "running"
        return "succeeded" if self.returncode == 0 else "failed"

    @property
    def elapsed_s(self) -> float:
        return (self.finished or time.time()) - self.started


OnDone = Callable[[SwapJob], Awaitable[None]]


class SwapJobs:
    """The console's swap: at most one running, the last one kept for the page."""

    def __init__(self) -> None:
        self.current: SwapJob | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self.current is not None and self.current.running

    async def start(self, job: SwapJob, env: Mapping[str, str], on_done: OnDone) -> None:
        """Run ``job.command``; ``on_done`` is awaited once it has exited."""
        if self.busy:
            raise InvalidRequestError("a weight swap is running: wait for it to end")
        try:
            process = await asyncio.create_subprocess_exec(
                *job.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=dict(env),
                start_new_session=True,  # its own process group: stopped whole at shutdown
                limit=1024 * 1024,  # longest output line
            )
        except OSError as exc:
            raise InvalidRequestError(f"cannot start the swap: {exc}") from exc
        self.current, self._process = job, process
        self._task = asyncio.create_task(self._follow(job, process, on_done))

    async def _follow(
        self, job: SwapJob, process: asyncio.subprocess.Process, on_done: OnDone
    ) -> None:
        assert process.stdout is not None
        async for line in process.stdout:
            job.output.append(line.decode(errors="replace").rstrip())
        job.returncode = await process.wait()
        job.finished = time.time()
        log.info("swap %s %s ended with %s", job.kind, job.checkpoint or "", job.returncode)
        await on_done(job)

    async def aclose(self) -> None:
        process, task = self._process, self._task
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_GRACE_S)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task
