"""Signal tests' view of process trees: start a program as a user would, record every process it
started (from /proc, before signalling it: orphans are re-parented and can no longer be found
from it), and check that none is left. `ProcessWatch.__exit__` kills whatever is left, so a
failing test leaves nothing running."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    started: int  # clock ticks after boot: tells a reused pid apart
    cmdline: str

    def __str__(self) -> str:
        return f"{self.pid} (group {self.pgid}) {self.cmdline[:160]}"


def _read(pid: int) -> Proc | None:
    """The process `pid` unless it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
    if fields[0] in ("Z", "X"):
        return None
    cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[19]), cmdline)


def descendants(root: int) -> list[Proc]:
    """Every live process under `root` (not `root` itself)."""
    procs = [p for p in (_read(int(d)) for d in os.listdir("/proc") if d.isdigit()) if p]
    children: dict[int, list[Proc]] = {}
    for proc in procs:
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def running(procs: Sequence[Proc]) -> list[Proc]:
    """Those of `procs` still running (same pid and start time, not a zombie)."""
    return [p for p in procs if (now := _read(p.pid)) is not None and now.started == p.started]


def still_running_after(procs: Sequence[Proc], timeout_s: float) -> list[Proc]:
    """Those of `procs` still running `timeout_s` from now (a SIGKILL takes effect when the
    process next runs, not when it is sent)."""
    deadline = time.monotonic() + timeout_s
    left = running(procs)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = running(left)
    return left


class ProcessWatch:
    """A program started as a user would (its own session, output to a file), and what it
    started, recorded by `snapshot()`."""

    def __init__(self, out_dir: Path) -> None:
        self.out_path = out_dir / "driver.out"
        self.process: subprocess.Popen[bytes] | None = None
        self.seen: dict[int, Proc] = {}

    def __enter__(self) -> ProcessWatch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.snapshot()
        # Whole groups: what a recorded process started after the last snapshot is in its group.
        ours = os.getpgid(0)
        for pgid in ({self.process.pid} | {p.pgid for p in self.seen.values()}) - {ours}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for proc in running(list(self.seen.values())):
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        self.process.wait(10)

    def start(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        with self.out_path.open("wb") as out:
            self.process = subprocess.Popen(
                list(argv),
                cwd=REPO,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def start_python(self, args: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        self.start([sys.executable, *args], env)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def snapshot(self) -> list[Proc]:
        """The program's live descendants now (also remembered for the end checks)."""
        procs = descendants(self.pid)
        self.seen.update((p.pid, p) for p in procs)
        return procs

    def wait_for(self, what: str, ready: Callable[[], bool], timeout_s: float) -> None:
        """Poll `ready` until true; fail with the program's output if it exits first."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(
                    f"exited with {self.process.returncode} before {what}:\n{self.output()[-4000:]}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout_s:.0f}s:\n{self.output()[-4000:]}")
            time.sleep(0.2)
            self.snapshot()

    def wait_for_tree(
        self, what: str, ready: Callable[[list[Proc]], bool], timeout_s: float
    ) -> None:
        self.wait_for(what, lambda: ready(self.snapshot()), timeout_s)

    def stop_with(
        self, *signals: signal.Signals, between_s: float = 0.3, timeout_s: float = 60
    ) -> int:
        """Send `signals` (to the program's process only, as `kill` does), `between_s` apart;
        return its exit status once every process it started is gone too. Fails, naming the
        survivors, if the program or any of them is still there after `timeout_s`."""
        assert self.process is not None
        self.snapshot()
        assert self.seen, f"nothing started yet:\n{self.output()[-4000:]}"
        for i, sig in enumerate(signals):
            if i:
                time.sleep(between_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
        started = time.monotonic()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout_s)
        left = still_running_after(
            list(self.seen.values()), timeout_s - (time.monotonic() - started)
        )
        if self.process.poll() is None:
            # tests.serving.signal_drivers dumps every thread's stack on SIGUSR1 (faulthandler).
            os.kill(self.pid, signal.SIGUSR1)
            time.sleep(1.0)
            raise AssertionError(f"still running:\n{self.output()[-8000:]}")
        assert not left, (
            "left running:\n" + "\n".join(map(str, left)) + f"\n---\n{self.output()[-4000:]}"
        )
        return self.process.returncode
