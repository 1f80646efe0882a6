"""`serving.processes`: a process that starts others stops every one of them, grandchildren
included, on SIGTERM and SIGINT alike, whatever its threads or event loop are doing.

The programs signalled here are `tests.serving.signal_drivers fleet ...` (sleeping children)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from serving.processes import ChildStartError, Interrupted, ProcessFleet, http_ok
from serving.replica import find_free_port
from tests.serving.process_tree import Proc, ProcessWatch, descendants, still_running_after

SIGNALS = [signal.SIGTERM, signal.SIGINT]


def start_fleet_driver(watch: ProcessWatch, mode: str, grace_s: float) -> None:
    watch.start_python(["-m", "tests.serving.signal_drivers", "fleet", mode, str(grace_s)])
    # 2 children, each with a grandchild (the `sh` leaders exec into `sleep`).
    watch.wait_for_tree("4 sleeping descendants", lambda t: len(t) == 4, timeout_s=30)
    watch.wait_for("ready", lambda: "ready" in watch.output(), timeout_s=10)


@pytest.mark.parametrize("mode", ["wait", "asyncio"])
@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_a_stop_signal_stops_every_child_and_grandchild_even_one_that_ignores_sigterm(
    tmp_path: Path, sig: signal.Signals, mode: str
) -> None:
    with ProcessWatch(tmp_path) as watch:
        start_fleet_driver(watch, mode, grace_s=1.0)
        assert watch.stop_with(sig, timeout_s=30) == 128 + sig
        assert f"interrupted by {sig.name}" in watch.output()


def test_a_second_signal_does_not_cut_the_teardown_short(tmp_path: Path) -> None:
    with ProcessWatch(tmp_path) as watch:
        start_fleet_driver(watch, "wait", grace_s=3.0)
        # The SIGTERM-ignoring child holds the teardown for its 3 s grace; an impatient
        # operator signals again meanwhile.
        status = watch.stop_with(
            signal.SIGTERM, signal.SIGINT, signal.SIGTERM, between_s=0.5, timeout_s=30
        )
        assert status == 128 + signal.SIGTERM


def group_members(pgid: int) -> list[Proc]:
    return [p for p in descendants(os.getpid()) if p.pgid == pgid]


def test_children_stop_when_the_block_ends_by_an_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), ProcessFleet(grace_s=1.0, handle_signals=False) as fleet:
        child = fleet.spawn(["sh", "-c", "sleep 3600 & exec sleep 3600"], name="sleeper")
        deadline = time.monotonic() + 10
        while len(started := group_members(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(started) == 2
        raise RuntimeError("boom")
    assert still_running_after(started, timeout_s=5) == []


def test_a_signal_to_this_process_raises_interrupted_and_the_handlers_come_back(
    tmp_path: Path,
) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as raised, ProcessFleet(grace_s=1.0) as fleet:
        child = fleet.spawn(["sleep", "3600"], name="sleeper")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert raised.value.exit_code == 143
    assert child.poll() is not None
    assert signal.getsignal(signal.SIGTERM) is previous


def test_wait_http_fails_fast_with_the_childs_log_when_it_exits(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    with ProcessFleet(handle_signals=False) as fleet:
        child = fleet.spawn(
            [sys.executable, "-c", "print('no model here'); raise SystemExit(3)"],
            name="server",
            log_path=log,
        )
        started = time.monotonic()
        with pytest.raises(ChildStartError, match=r"server exited with 3:\nno model here"):
            fleet.wait_http(child, "http://127.0.0.1:9/health", timeout_s=60)
        assert time.monotonic() - started < 10
    assert not http_ok("http://127.0.0.1:9/health")


def test_wait_http_counts_the_time_to_ready_from_the_spawn(tmp_path: Path) -> None:
    port = find_free_port()
    with ProcessFleet(handle_signals=False) as fleet:
        before = time.monotonic()
        child = fleet.spawn(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            name="server",
            log_path=tmp_path / "server.log",
            cwd=tmp_path,
        )
        time.sleep(0.5)  # counts: a benchmark's time to ready starts at the spawn
        took = fleet.wait_http(child, f"http://127.0.0.1:{port}/", timeout_s=30, poll_s=0.01)
        assert 0.5 <= took <= time.monotonic() - before


def test_a_fleet_outside_the_main_thread_must_leave_signals_alone() -> None:
    errors: list[BaseException] = []

    def enter() -> None:
        try:
            with ProcessFleet():
                pass
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=enter)
    thread.start()
    thread.join()
    assert errors and "handle_signals=False" in str(errors[0])
