"""A record writer that keeps failing takes the gateway out of rotation (``/ready`` 503) and says
why in ``/metrics``; it comes back by itself once the fault is gone."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from traffic.store import writer as writer_module

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hello"}]}


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in /metrics")


def test_a_failing_writer_makes_the_gateway_unready_until_it_recovers(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Long enough that the readings below fall inside the burst's window on a loaded machine
    # (with 1 s the writer was healthy again before /metrics was read), short enough to recover.
    monkeypatch.setattr(writer_module, "FAULT_WINDOW_S", 5.0)
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    store = {
        "enabled": True,
        "url": url,
        "spool_dir": str(tmp_path / "spool"),
        "retry_initial_s": 0.1,
        "retry_max_s": 0.5,
        "writer_process": False,  # the fault is planted in this process's writer
    }
    gw = GatewayThread(gateway_config(frontier_sim.base_url, store=store), use_store=True).start()
    try:
        assert httpx.get(gw.base_url + "/ready").status_code == 200
        writer = gw.app.state.recorder.writer
        real_write = writer._write_batch

        async def broken(records: Any) -> None:
            raise RuntimeError("a bug in the writer")

        writer._write_batch = broken
        deadline = time.monotonic() + 20
        while httpx.get(gw.base_url + "/ready").status_code == 200:
            assert time.monotonic() < deadline, "the writer never became unhealthy"
            r = httpx.post(gw.base_url + "/v1/chat/completions", json=CHAT, timeout=30)
            assert r.status_code == 200  # clients are still answered meanwhile
            time.sleep(0.05)
        ready = httpx.get(gw.base_url + "/ready")
        assert ready.json()["status"] == "recorder unhealthy"
        metrics = httpx.get(gw.base_url + "/metrics").text
        assert _metric(metrics, "switchyard_store_faults_total") >= 3
        assert _metric(metrics, "switchyard_store_healthy") == 0

        writer._write_batch = real_write
        deadline = time.monotonic() + 20
        while httpx.get(gw.base_url + "/ready").status_code != 200:
            assert time.monotonic() < deadline, "the writer never recovered"
            time.sleep(0.1)
    finally:
        gw.stop()


def test_metrics_report_requests_in_flight(gateway: Any) -> None:
    text = httpx.get(gateway.base_url + "/metrics").text
    assert _metric(text, "switchyard_in_flight_requests") == 0
