"""The fleet shared by the tests of this package: three gateway processes on one Redis fleet
and one PostgreSQL schema, in front of two simulated replicas (started once for the package)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from serving.build import ensure_demo_model
from tests.fixtures.vllm_fixture import cache_dir
from tests.gateway.fleet.harness import Fleet, running_fleet

GATEWAYS = 3


@pytest.fixture(scope="package")
def model_dir() -> Path:
    return ensure_demo_model(cache_dir())


@pytest.fixture(scope="package")
def replica_sims() -> Iterator[list[ThreadedSimulator]]:
    sims = [run_in_thread(SimulatorConfig()) for _ in range(2)]
    yield sims
    for sim in sims:
        sim.stop()


@pytest.fixture(scope="package")
def fleet(
    replica_sims: list[ThreadedSimulator], model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    """Three gateways of one fleet; the learned policy's state file is gateway 0's alone."""
    work = tmp_path_factory.mktemp("fleet")

    def learned(i: int, config: dict[str, Any]) -> None:
        config["routing"]["learned"] = {
            "local_target": "local",
            "frontier_target": "big",
            "state_file": str(work / f"learned-{i}.json"),
        }

    replicas = [s.base_url for s in replica_sims]
    with running_fleet(GATEWAYS, replicas, model_dir, work, "fleet-test", learned) as fleet:
        yield fleet
