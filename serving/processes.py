"""Child processes that never outlive the process that started them, on SIGTERM and SIGINT alike.

Every process of ours that starts others (`scripts/demo.py`, `scripts/flywheel.py`, the replica
supervisor's CLI, the benchmarks) does it through a `ProcessFleet`, entered first in `main()`:

    with ProcessFleet() as fleet:              # main thread, before anything else
        gateway = fleet.spawn(argv, name="gateway", log_path=...)
        fleet.wait_http(gateway, url + "/ready", timeout_s=120)
        ...                                    # SIGTERM or SIGINT here raises Interrupted
    # every child's process group is stopped here, whatever ended the block

1. Own process group. Each child leads a new session (`start_new_session`), so a terminal's
   Ctrl-C reaches only the parent, which decides how its children stop; what a child starts in
   turn (vLLM's engine core and workers, multiprocessing's resource tracker) stays in the
   child's group, so one `killpg` reaches all of it.
2. Signals. While a fleet is entered, SIGTERM and SIGINT both raise `Interrupted` (a
   `KeyboardInterrupt`) in the main thread, so `with` blocks and `finally` clauses unwind,
   inside `asyncio.run` too. CPython runs a handler in the main thread whichever thread the
   kernel handed the signal to, so no thread can take it with the default action and kill the
   process with its children left running (the demo blocked SIGTERM in its main thread only,
   after other threads existed, and died that way). Only the first signal raises; later ones
   are ignored, so an impatient second Ctrl-C cannot cut the teardown short (it is bounded: 3).
   A signal that arrives while the fleet starts or stops children is held until that is done,
   so no child is left unregistered or half-stopped.
3. Stop (`stop_groups`). SIGTERM to every group at once, wait for the leaders until one
   deadline (`grace_s`), SIGKILL to every group (stragglers, and children that outlived their
   leader), reap.

Nothing here survives a SIGKILL of the parent: its children then keep running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
STOP_GRACE_S = 20.0
READY_POLL_S = 0.25  # children here take seconds to minutes to start: no need to ask more often
_REAP_S = 5.0

Child = subprocess.Popen[bytes]
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGINT arrived while a fleet was entered (raised in the main thread)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports it (130 SIGINT, 143 SIGTERM)."""
        return 128 + self.signum


class ChildStartError(RuntimeError):
    """A child exited, or did not answer its readiness URL in time; the message has its log."""


class _SignalGuard:
    """SIGTERM/SIGINT handling while at least one fleet is entered: one per process, because
    signal dispositions are per process."""

    def __init__(self) -> None:
        self._depth = 0
        self._previous: dict[int, _Handler] = {}
        self._received: int | None = None
        self._raised = False
        self._held = 0

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(
                "signal handlers can only be set in the main thread: enter the ProcessFleet "
                "there, or pass handle_signals=False"
            )
        if self._depth == 0:
            self._received, self._raised, self._held = None, False, 0
            self._previous = {sig: signal.signal(sig, self._handle) for sig in STOP_SIGNALS}
        self._depth += 1

    def uninstall(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._received = None
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._received is not None:
            return  # already stopping
        self._received = signum
        if self._held == 0:
            self._raised = True
            raise Interrupted(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """A signal arriving in the body is raised once the body is done (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
        # Reached only when the body raised nothing (that exception wins otherwise).
        signum = self._received
        if signum is not None and not self._raised and self._held == 0 and self._depth > 0:
            self._raised = True
            raise Interrupted(signum)


_SIGNALS = _SignalGuard()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise `Interrupted` inside the block (see the module docstring, 2);
    the previous handlers come back on exit. Main thread only; nested use is fine."""
    _SIGNALS.install()
    try:
        yield
    finally:
        _SIGNALS.uninstall()


def start_group(
    argv: Sequence[str],
    *,
    log_path: Path | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Child:
    """Start `argv` leading a new process group: stdin /dev/null, stdout and stderr appended to
    `log_path` (discarded without one), `env` the whole environment (this process's if None)."""
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(log_path.open("ab")) if log_path else subprocess.DEVNULL
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def stop_groups(children: Iterable[Child], grace_s: float = STOP_GRACE_S) -> None:
    """Stop the process group of every child (started by `start_group`): SIGTERM to all, wait for
    the leaders until `grace_s` from now, SIGKILL to all, reap. Idempotent."""
    children = list(children)
    with _SIGNALS.held():
        for child in children:
            _signal_group(child, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(max(0.0, deadline - time.monotonic()))
        for child in children:
            _signal_group(child, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(_REAP_S)


def _signal_group(child: Child, sig: signal.Signals) -> None:
    # A group outlives its leader while any member is left, so its id cannot be reused by then.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, sig)


def _group_gone(child: Child) -> bool:
    if child.poll() is None:
        return False
    try:
        os.killpg(child.pid, 0)
    except (ProcessLookupError, PermissionError):
        return True
    return False


def http_ok(url: str, headers: Mapping[str, str] | None = None) -> bool:
    """True if GET `url` answers 200 within 2 s."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=2) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


class ProcessFleet:
    """Children in their own process groups, all stopped when the `with` block ends, whatever
    ends it; with `handle_signals` (the default) the block also stops on SIGTERM and SIGINT."""

    def __init__(self, *, grace_s: float = STOP_GRACE_S, handle_signals: bool = True) -> None:
        self.grace_s = grace_s
        self._handle_signals = handle_signals
        self._children: list[Child] = []
        self._names: dict[int, str] = {}
        self._logs: dict[int, Path] = {}
        self._spawned_at: dict[int, float] = {}

    def __enter__(self) -> ProcessFleet:
        if self._handle_signals:
            _SIGNALS.install()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.stop_all()
        finally:
            if self._handle_signals:
                _SIGNALS.uninstall()

    def spawn(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log_path: Path | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Child:
        """`start_group(argv, ...)`, registered under `name` before any signal can interrupt."""
        with _SIGNALS.held():
            self._children = [c for c in self._children if not _group_gone(c)]
            spawned_at = time.monotonic()  # before the fork: time to ready counts from here
            child = start_group(argv, log_path=log_path, env=env, cwd=cwd)
            self._children.append(child)
            self._names[child.pid] = name
            self._spawned_at[child.pid] = spawned_at
            if log_path is not None:
                self._logs[child.pid] = log_path
        return child

    def name(self, child: Child) -> str:
        return self._names.get(child.pid, str(child.args))

    def log_tail(self, child: Child, lines: int = 30) -> str:
        """The last `lines` of the child's log ('' without one)."""
        path = self._logs.get(child.pid)
        try:
            text = path.read_text(errors="replace") if path else ""
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_http(
        self,
        child: Child,
        url: str,
        timeout_s: float,
        headers: Mapping[str, str] | None = None,
        poll_s: float = READY_POLL_S,
    ) -> float:
        """Seconds from the child's spawn until GET `url` answered 200, asked every `poll_s`.
        ChildStartError, with the log tail, if the child exits first or `timeout_s` (counted
        from this call) passes; the child is left to the fleet."""
        started = time.monotonic()
        spawned_at = self._spawned_at.get(child.pid, started)
        while time.monotonic() - started < timeout_s:
            if child.poll() is not None:
                raise ChildStartError(
                    f"{self.name(child)} exited with {child.returncode}:\n{self.log_tail(child)}"
                )
            if http_ok(url, headers):
                return time.monotonic() - spawned_at
            time.sleep(poll_s)
        raise ChildStartError(
            f"{self.name(child)} not ready after {timeout_s:.0f}s at {url}:\n{self.log_tail(child)}"
        )

    def wait_any(self, poll_s: float = 0.5) -> Child:
        """Block until a child exits, and return it (a stop signal raises meanwhile)."""
        while True:
            for child in self._children:
                if child.poll() is not None:
                    return child
            time.sleep(poll_s)

    def stop(self, child: Child) -> None:
        """Stop one child's group now and forget it."""
        if child in self._children:
            self._children.remove(child)
        stop_groups([child], self.grace_s)

    def stop_all(self) -> None:
        """Stop every child's group at once (module docstring, 3). Idempotent."""
        children, self._children = self._children, []
        stop_groups(children, self.grace_s)
