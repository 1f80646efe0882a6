"""`make flywheel` stopped with SIGTERM or SIGINT leaves no process behind: not its vLLM replica
with the replica's own children, nor the simulator, nor the gateway, even when a second signal
arrives while it stops. The flywheel's own `main` runs (FLYWHEEL_SMOKE) with vLLM's command
swapped for `tests.serving.fake_vllm` (`tests.serving.signal_drivers`), so no vLLM boots."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.serving.fake_vllm import ENGINE_CORE_MARK
from tests.serving.process_tree import Proc, ProcessWatch


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGTERM, signal.SIGINT), (signal.SIGINT, signal.SIGTERM)],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_stop_signal_stops_the_replica_its_engine_core_the_simulator_and_the_gateway(
    tmp_path: Path, first: signal.Signals, second: signal.Signals
) -> None:
    env = {"FLYWHEEL_SMOKE": "1", "FLYWHEEL_DIR": str(tmp_path / "flywheel")}

    def everything_started(tree: list[Proc]) -> bool:
        names = " ".join(p.cmdline for p in tree)
        return all(m in names for m in (ENGINE_CORE_MARK, "loadtests.frontier_sim", "-m gateway"))

    with ProcessWatch(tmp_path) as watch:
        watch.start_python(["-m", "tests.serving.signal_drivers", "flywheel"], env)
        watch.wait_for_tree("replica, simulator and gateway", everything_started, timeout_s=300)
        assert watch.stop_with(first, second, timeout_s=60) == 128 + first
        assert f"stopped by {first.name}" in watch.output()
