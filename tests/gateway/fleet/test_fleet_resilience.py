"""A fleet survives the loss of a part: a gateway stopped under load loses no record and the
client's retries to the others succeed; with Redis gone the gateways keep serving on their last
known state, say so in ``/metrics``, refuse fleet changes (503) and catch up when it returns.

Three gateway processes of their own here (one is stopped), on a Redis of their own (stopped and
started again), recording into PostgreSQL.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from loadtests.bench.servers import ServerFleet
from loadtests.frontier_sim import ThreadedSimulator
from tests.gateway.fleet.harness import (
    ADMIN,
    REDIS_URL,
    Fleet,
    PrivateRedis,
    RoundRobin,
    drop_schema,
    gateway_configs,
    new_schema,
    pg_dsn,
    start_gateways,
    wait_until,
)

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis | None]:
    """A Redis of this module's own (None without a redis-server binary: the shared one then,
    and the outage test skips)."""
    if not PrivateRedis.available():
        yield None
        return
    server = PrivateRedis(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def small_fleet(
    own_redis: PrivateRedis | None,
    replica_sims: list[ThreadedSimulator],
    model_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("small-fleet")
    schema = new_schema()
    replicas = [s.base_url for s in replica_sims]
    name = f"switchyard:fleet-test:{uuid.uuid4().hex[:10]}"
    configs = gateway_configs(
        3,
        replicas=replicas,
        tokenizer_dir=model_dir,
        schema=schema,
        work=work,
        fleet_name=name,
        redis_url=own_redis.url if own_redis is not None else REDIS_URL,
    )
    try:
        with ServerFleet(work / "logs") as servers:
            yield Fleet(
                start_gateways(servers, configs, work), servers, name, schema, replicas, work
            )
    finally:
        drop_schema(schema)


def _recorded(schema: str, ids: list[str]) -> Counter[str]:
    with psycopg.connect(pg_dsn(schema)) as conn:
        rows = conn.execute(
            "SELECT id::text FROM inference WHERE id::text = ANY(%s)", (ids,)
        ).fetchall()
    return Counter(row[0] for row in rows)


def test_stopping_one_gateway_under_load_loses_no_record_and_retries_succeed(
    small_fleet: Fleet,
) -> None:
    answered: list[str] = []
    failures: list[str] = []
    clients = [RoundRobin(small_fleet.urls) for _ in range(3)]
    started = threading.Event()

    def load(client: RoundRobin) -> None:
        for turn in range(60):
            _, r = client.chat(f"stop one {turn}")
            if r.status_code != 200:
                failures.append(r.text)
                continue
            answered.append(r.headers["x-request-id"])
            if len(answered) >= 30:
                started.set()

    threads = [threading.Thread(target=load, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    assert started.wait(60)
    stopped = small_fleet.gateways[2]
    stopped.server.process.send_signal(signal.SIGTERM)  # as an orchestrator stops a pod
    for t in threads:
        t.join(120)
    try:
        status = stopped.server.process.wait(60)
    except subprocess.TimeoutExpired:
        # Which shutdown step it is in: each finished one is logged with its time.
        tail = stopped.server.log_path.read_text().splitlines()[-40:]
        pytest.fail("the gateway did not exit within 60 s of SIGTERM:\n" + "\n".join(tail))
    # uvicorn ends by re-raising the signal it caught, once it has shut down cleanly
    assert status in (0, -signal.SIGTERM)
    log = stopped.server.log_path.read_text()
    assert "Application shutdown complete" in log
    assert "shutdown: record writer in" in log  # each step timed, for an orchestrator's grace
    small_fleet.gateways.remove(stopped)
    assert not failures
    assert len(answered) == 3 * 60  # every request was answered, by some gateway
    assert sum(c.retries for c in clients) > 0  # some had to go to another gateway
    for c in clients:
        c.close()
    # Each answer is recorded exactly once (the stopped gateway flushed its writer).
    wait_until(
        lambda: sum(_recorded(small_fleet.schema, answered).values()) >= len(answered),
        30,
        "every answer is in PostgreSQL",
    )
    assert set(_recorded(small_fleet.schema, answered).values()) == {1}


def test_with_redis_down_the_gateways_serve_on_and_catch_up_when_it_returns(
    small_fleet: Fleet, own_redis: PrivateRedis | None
) -> None:
    if own_redis is None:
        pytest.skip("no redis-server binary: the shared Redis cannot be stopped for a test")
    gateways = small_fleet.gateways
    assert all(g.metric("switchyard_fleet_state_stale") == 0 for g in gateways)
    before = gateways[0].fleet()["policy_version"]
    own_redis.stop()
    try:
        wait_until(
            lambda: all(g.metric("switchyard_fleet_state_stale") == 1 for g in gateways),
            30,
            "every gateway says its fleet state is stale",
        )
        client = RoundRobin(small_fleet.urls)
        answered = []
        for turn in range(12):
            _, r = client.chat(f"redis down {turn}")
            assert r.status_code == 200, r.text
            assert r.headers["x-switchyard-policy-version"] == before  # the last known state
            answered.append(r.headers["x-request-id"])
        client.close()
        drain = {"target": "local", "replica": small_fleet.replicas[0], "timeout_s": 1}
        r = httpx.post(gateways[0].url + "/admin/replicas/drain", json=drain, headers=ADMIN)
        assert r.status_code == 503 and r.json()["error"]["code"] == "fleet_unavailable"
    finally:
        own_redis.start()  # empty: the fleet is seeded again from the gateways' state
    wait_until(
        lambda: all(g.metric("switchyard_fleet_state_stale") == 0 for g in gateways),
        30,
        "every gateway is back on the fleet",
    )
    for logs in (g.server.log_path.read_text() for g in gateways):
        assert "Redis unreachable" in logs and "Redis reachable again" in logs
    # Changes reach every gateway again, and nothing answered meanwhile went unrecorded.
    drained = small_fleet.replicas[0]
    gateways[1].admin("POST", "/admin/replicas/drain", {**drain, "timeout_s": 5})
    for gateway in gateways:
        controls = {c["replica"]: c for c in gateway.fleet()["replicas"]}
        assert controls[drained]["drained"] is True
    gateways[0].admin("POST", "/admin/replicas/undrain", {"target": "local", "replica": drained})
    wait_until(
        lambda: sum(_recorded(small_fleet.schema, answered).values()) == len(answered),
        30,
        "the answers served while Redis was down are in PostgreSQL",
    )
