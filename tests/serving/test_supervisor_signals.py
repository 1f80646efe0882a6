"""`python -m serving.supervisor` stops every replica, and what each replica started, on SIGTERM
and SIGINT alike, and a second signal while it stops does not cut that short. The replicas are
`tests.serving.fake_vllm` (vLLM's command swapped in `tests.serving.signal_drivers`): the
supervisor's own CLI and `VllmReplica` run unchanged."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.serving.fake_vllm import ENGINE_CORE_MARK
from tests.serving.process_tree import Proc, ProcessWatch


def all_ready(output: str) -> bool:
    for line in reversed(output.splitlines()):
        if line.startswith("["):
            states = [slot["state"] for slot in json.loads(line)]
            return states == ["ready", "ready"]
    return False


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_stop_signal_stops_every_replica_and_its_engine_core_even_if_sent_again(
    tmp_path: Path, first: signal.Signals, second: signal.Signals
) -> None:
    (tmp_path / "model").mkdir()
    args = ["--model", str(tmp_path / "model"), "--cache-dir", str(tmp_path / "cache")]
    args += ["--replicas", "2", "--status-interval", "0.3"]
    with ProcessWatch(tmp_path) as watch:
        watch.start_python(["-m", "tests.serving.signal_drivers", "supervisor", *args])
        watch.wait_for("2 ready replicas", lambda: all_ready(watch.output()), timeout_s=60)

        def engine_cores(tree: list[Proc]) -> bool:
            return sum(ENGINE_CORE_MARK in p.cmdline for p in tree) == 2

        watch.wait_for_tree("2 engine cores", engine_cores, timeout_s=10)
        assert watch.stop_with(first, second, timeout_s=40) == 0
