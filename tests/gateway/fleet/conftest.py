"""The fleet shared by the tests of this package: three gateway processes on one Redis fleet
and one PostgreSQL schema, in front of two simulated replicas (started once for the package)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from loadtests.bench.servers import ServerFleet
from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from serving.build import ensure_demo_model
from tests.fixtures.vllm_fixture import cache_dir
from tests.gateway.fleet.harness import (
    PG_URL,
    REDIS_URL,
    Fleet,
    drop_redis_keys,
    drop_schema,
    gateway_configs,
    new_schema,
    start_gateways,
)

GATEWAYS = 3


def _require_services() -> None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {exc}")
    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {exc}".splitlines()[0])


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
    _require_services()
    work = tmp_path_factory.mktemp("fleet")
    name = f"switchyard:fleet-test:{uuid.uuid4().hex[:10]}"
    schema = new_schema()
    replicas = [s.base_url for s in replica_sims]
    configs = gateway_configs(
        GATEWAYS,
        replicas=replicas,
        tokenizer_dir=model_dir,
        schema=schema,
        work=work,
        fleet_name=name,
    )
    for i, config in enumerate(configs):
        config["routing"]["learned"] = {
            "local_target": "local",
            "frontier_target": "big",
            "state_file": str(work / f"learned-{i}.json"),
        }
    try:
        with ServerFleet(work / "logs") as servers:
            gateways = start_gateways(servers, configs, work)
            yield Fleet(gateways, servers, name, schema, replicas, work, configs)
    finally:
        drop_redis_keys(REDIS_URL, name)
        drop_schema(schema)
