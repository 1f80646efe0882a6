"""A promotion outlives the process: a gateway (a real process with a config file and a SQLite
store) serves the promoted routing again after a SIGHUP reload and after a restart, until an
operator edits the file's routing; then the file's routing is served, and reverting the file
does not bring the retired promotion back."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from serving.names import ADMIN_TOKEN_ENV
from tests.fixtures.gateway_fixture import gateway_config

REPO = Path(__file__).resolve().parents[3]
TOKEN = "release-admin"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
BODY = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Gateway:
    """`python -m gateway --config <file>` on a port of its own, started and stopped by hand."""

    def __init__(self, config_path: Path, log: Path) -> None:
        self.config_path, self.log = config_path, log
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", ADMIN_TOKEN_ENV: TOKEN}
        argv = [sys.executable, "-m", "gateway", "--config", str(self.config_path)]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*argv, "--port", str(self.port)], cwd=REPO, env=env, stdout=out, stderr=out
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(self.base + "/ready").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError("gateway not ready: " + self.log.read_text()[-3000:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            assert self.proc.wait(30) in (0, -signal.SIGTERM)

    def version(self) -> str:
        r = httpx.post(self.base + "/v1/chat/completions", json=BODY, timeout=30)
        assert r.status_code == 200, r.text
        return r.headers["x-switchyard-policy-version"]

    def reloads(self) -> int:
        return self.log.read_text(errors="replace").count("routing reloaded on SIGHUP")

    def sighup(self) -> str:
        """SIGHUP, then the version served once the reload is done (its log line)."""
        assert self.proc is not None
        before = self.reloads()
        self.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while self.reloads() == before:
            assert time.monotonic() < deadline, "no reload logged"
            time.sleep(0.05)
        return self.version()


@pytest.fixture
def file_and_gateway(frontier_sim: Any, tmp_path: Path) -> Iterator[tuple[dict[str, Any], Gateway]]:
    cfg = gateway_config(
        frontier_sim.base_url,
        store={"url": f"sqlite:///{tmp_path / 'traffic.db'}", "spool_dir": str(tmp_path / "spool")},
    ).model_dump(mode="json")
    cfg["routing"]["version"] = "file-v1"
    path = tmp_path / "switchyard.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gw = Gateway(path, tmp_path / "gateway.log")
    gw.start()
    try:
        yield cfg, gw
    finally:
        gw.stop()


def test_a_promotion_survives_sighup_and_restart_until_the_file_changes(
    file_and_gateway: tuple[dict[str, Any], Gateway], tmp_path: Path
) -> None:
    cfg, gw = file_and_gateway
    db = tmp_path / "traffic.db"
    assert gw.version() == "file-v1"
    candidate = {**cfg["routing"], "version": "promoted-v2", "default": "frontier-openai"}
    r = httpx.post(
        gw.base + "/admin/canary", json={"routing": candidate, "share": 0.5}, headers=ADMIN
    )
    assert r.status_code == 200, r.text
    assert httpx.post(gw.base + "/admin/canary/promote", headers=ADMIN).status_code == 200
    assert gw.version() == "promoted-v2"

    # A reload re-reads the unchanged file: the live release is served, not the file's routing.
    assert gw.sighup() == "promoted-v2"
    gw.stop()
    gw.start()
    assert gw.version() == "promoted-v2"  # a restart too

    # The operator edits the file's routing: the newer decision wins, the promotion is retired.
    edited = {**cfg, "routing": {**cfg["routing"], "version": "file-v3"}}
    gw.config_path.write_text(yaml.safe_dump(edited))
    assert gw.sighup() == "file-v3"
    # Reverting the file brings the file's routing back, not the retired promotion.
    gw.config_path.write_text(yaml.safe_dump(cfg))
    assert gw.sighup() == "file-v1"
    # An automation reloading through the admin API names itself in the change log.
    reloaded = httpx.post(
        gw.base + "/admin/reload", headers={**ADMIN, "x-switchyard-actor": "flywheel"}
    )
    assert reloaded.status_code == 200, reloaded.text
    gw.stop()
    gw.start()
    assert gw.version() == "file-v1"
    gw.stop()

    with sqlite3.connect(str(db)) as conn:
        log = conn.execute("SELECT actor, action, subject FROM change_log ORDER BY ts").fetchall()
        status = dict(conn.execute("SELECT id, status FROM policy_version").fetchall())
    assert ("admin-api", "routing.promote", "promoted-v2") in log
    reloads = [(actor, subject) for actor, action, subject in log if action == "routing.reload"]
    assert reloads == [
        ("sighup", "promoted-v2"),
        ("sighup", "file-v3"),
        ("sighup", "file-v1"),
        ("flywheel", "file-v1"),
    ]
    assert status["promoted-v2"] == "retired"
