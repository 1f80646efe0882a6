"""``switchyard serve --workers N``: N processes on one socket form a fleet (a SIGHUP reload
reaches them all); SIGTERM drains them all and every answer is recorded exactly once (SQLite,
several writer processes); more than one worker without a shared fleet is refused with the
reason."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path

import pytest
import yaml

from gateway.config import parse_config
from gateway.workers import WorkersRefused, host_cores, resolve_workers
from loadtests.bench.servers import ServerFleet, free_port
from loadtests.frontier_sim import ThreadedSimulator
from tests.gateway.fleet.harness import (
    ENV,
    REDIS_URL,
    REPO,
    Gateway,
    RoundRobin,
    drop_redis_keys,
    fleet_config,
    wait_until,
)


def _config(replicas: list[str], model_dir: Path, tmp_path: Path, fleet: str) -> dict[str, object]:
    config = fleet_config(
        port=free_port(),
        replicas=replicas,
        tokenizer_dir=model_dir,
        store_url=f"sqlite:///{tmp_path / 'traffic.db'}",
        spool=tmp_path / "spool",  # one spool for both workers (segments are flock-claimed)
        fleet_name=fleet,
    )
    if fleet == "local":
        config["fleet"] = {"backend": "local"}
    return config


def test_one_worker_per_core_with_a_redis_fleet_and_one_without() -> None:
    base = {"backends": {"x": {"kind": "vllm", "model": "m", "replicas": ["http://h:1"]}}}
    data = {**base, "routing": {"default": "x"}}
    assert resolve_workers(parse_config(data), None) == 1
    redis = parse_config({**data, "fleet": {"backend": "redis"}})
    assert resolve_workers(redis, None) == host_cores()
    with pytest.raises(WorkersRefused, match="fleet"):
        resolve_workers(parse_config(data), 2)


def test_more_workers_without_a_shared_fleet_are_refused_with_the_reason(
    replica_sims: list[ThreadedSimulator], model_dir: Path, tmp_path: Path
) -> None:
    path = tmp_path / "switchyard.yaml"
    replicas = [s.base_url for s in replica_sims]
    path.write_text(yaml.safe_dump(_config(replicas, model_dir, tmp_path, "local")))
    argv = [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "2"]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "backend: redis" in done.stderr


@pytest.mark.redis
def test_sigterm_drains_every_worker_and_records_each_answer_once(
    replica_sims: list[ThreadedSimulator], model_dir: Path, tmp_path: Path
) -> None:
    name = f"switchyard:fleet-test:{uuid.uuid4().hex[:10]}"
    replicas = [s.base_url for s in replica_sims]
    config = _config(replicas, model_dir, tmp_path, name)
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(config))
    port = config["gateway"]["listen"]["port"]  # type: ignore[index]
    argv = [sys.executable, "-m", "gateway", "--config", str(path), "--workers", "2"]
    answered: list[str] = []
    try:
        with ServerFleet(tmp_path / "logs") as servers:
            server = servers.spawn("workers", argv, port, "/ready", env=ENV, cwd=REPO)
            servers.wait_ready(server, 120, poll_s=0.05)
            gateway = Gateway(server, path)
            wait_until(lambda: len(gateway.fleet()["members"]) == 2, 30, "two workers joined")
            answering: set[str] = set()

            def both_answer() -> bool:
                answering.add(gateway.fleet()["member"])
                return len(answering) == 2

            wait_until(both_answer, 30, "both workers answer on the one port")
            # SIGHUP to the parent: one worker reloads the file, the fleet brings the other along.
            config["routing"]["version"] = "v-hup"  # type: ignore[index]
            path.write_text(yaml.safe_dump(config))
            server.process.send_signal(signal.SIGHUP)
            wait_until(
                lambda: all(gateway.fleet()["policy_version"] == "v-hup" for _ in range(8)),
                30,
                "both workers serve the reloaded routing",
            )
            stop = threading.Event()

            def load() -> None:
                client = RoundRobin([gateway.url])
                while not stop.is_set():
                    try:
                        _, r = client.chat("workers")
                    except AssertionError:  # the socket is closed: the parent stopped
                        break
                    assert r.status_code == 200, r.text
                    answered.append(r.headers["x-request-id"])
                client.close()

            threads = [threading.Thread(target=load) for _ in range(4)]
            for t in threads:
                t.start()
            wait_until(lambda: len(answered) >= 40, 60, "load through both workers")
            server.process.send_signal(signal.SIGTERM)  # the parent, as `kill <pid>` does
            assert server.process.wait(60) == 0
            stop.set()
            for t in threads:
                t.join(30)
            log = server.log_path.read_text()
    finally:
        drop_redis_keys(REDIS_URL, name)
    assert log.count("Application shutdown complete") == 2
    assert "all workers stopped" in log
    with sqlite3.connect(tmp_path / "traffic.db") as db:
        ids = Counter(row[0] for row in db.execute("SELECT id FROM inference"))
    assert set(ids.values()) == {1}  # nothing twice ...
    assert set(answered) <= set(ids)  # ... and nothing answered left unrecorded
