"""Fallback chains, circuit breakers, mid-stream failures and reloads, on loopback servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cut_sim():  # type: ignore[no-untyped-def]
    sim = run_in_thread(SimulatorConfig(cut_stream_after_chunks=3))
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def failover_gateway(frontier_sim, cut_sim):  # type: ignore[no-untyped-def]
    sim = frontier_sim.base_url
    cfg = gateway_config(
        sim,
        gateway={"breaker": {"failure_threshold": 2, "cooldown_s": 60}},
        backends={
            "dead-local": {"kind": "vllm", "model": "m", "replicas": ["http://127.0.0.1:9"]},
            "half-dead-local": {
                "kind": "vllm",
                "model": "sim-local",
                "replicas": ["http://127.0.0.1:9", sim],
            },
            "cut-local": {"kind": "vllm", "model": "sim-local", "replicas": [cut_sim.base_url]},
            "frontier-openai": {
                "kind": "litellm",
                "model": "openai/gpt-4o-mini",
                "api_base": sim + "/v1",
            },
            "breaker-dead": {"kind": "vllm", "model": "m", "replicas": ["http://127.0.0.1:9"]},
        },
        routing={
            "default": "frontier-openai",
            "aliases": {
                "dead": "dead-local",
                "cut": "cut-local",
                "half": "half-dead-local",
                "breaker": "breaker-dead",
            },
            "fallbacks": {
                "dead-local": ["frontier-openai"],
                "cut-local": ["frontier-openai"],
                "breaker-dead": ["frontier-openai"],
            },
        },
    )
    gw = GatewayThread(cfg).start()
    yield gw
    gw.stop()


@pytest.fixture
def client(failover_gateway: GatewayThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=failover_gateway.base_url + "/v1", api_key="k", max_retries=0)


def test_dead_target_fails_over_to_the_fallback(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model="dead", messages=[{"role": "user", "content": "x"}]
    )
    assert raw.headers["x-switchyard-target"] == "frontier-openai"
    assert raw.parse().choices[0].message.content


def test_stream_failing_before_first_byte_fails_over(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(
        model="dead", messages=[{"role": "user", "content": "x"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)


def test_dead_replica_is_skipped_for_a_healthy_one(
    client: openai.OpenAI, failover_gateway: GatewayThread
) -> None:
    for _ in range(4):
        raw = client.chat.completions.with_raw_response.create(
            model="half", messages=[{"role": "user", "content": "x"}]
        )
        assert raw.headers["x-switchyard-target"] == "half-dead-local"
        assert raw.headers["x-switchyard-replica"] != "http://127.0.0.1:9"


def test_stream_cut_mid_answer_ends_with_an_error_event_not_a_silent_200(
    client: openai.OpenAI, failover_gateway: GatewayThread
) -> None:
    with httpx.stream(
        "POST",
        failover_gateway.base_url + "/v1/chat/completions",
        json={"model": "cut", "stream": True, "messages": [{"role": "user", "content": "x"}]},
    ) as resp:
        text = "".join(resp.iter_text())
        rid = resp.headers["x-request-id"]
    assert '"error"' in text and "stream_interrupted" in text
    assert "[DONE]" not in text
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(
            model="cut", messages=[{"role": "user", "content": "x"}], stream=True
        ):
            pass
    record = failover_gateway.sink.wait_for(rid)
    assert record.status == 502 and record.error


def test_breaker_opens_and_stops_calling_the_dead_target(
    client: openai.OpenAI, failover_gateway: GatewayThread
) -> None:
    rids = []
    for _ in range(4):
        raw = client.chat.completions.with_raw_response.create(
            model="breaker", messages=[{"role": "user", "content": "x"}]
        )
        rids.append(raw.headers["x-request-id"])
    last = failover_gateway.sink.wait_for(rids[-1])
    assert last.attempts[0] == {"target": "breaker-dead", "status": 503, "error": "circuit open"}
    metrics = httpx.get(failover_gateway.base_url + "/metrics").text
    assert 'switchyard_breaker_state{target="breaker-dead"} 2.0' in metrics


def test_admin_reload_swaps_policy_without_dropping_in_flight_streams(
    frontier_sim,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "admin-secret")
    slow = run_in_thread(SimulatorConfig(tokens_per_s=40))
    cfg = gateway_config(slow.base_url)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json")))
    gw = GatewayThread(cfg, config_path=path).start()
    try:
        result: dict[str, str] = {}

        def consume() -> None:
            body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "x"}]}
            with httpx.stream("POST", gw.base_url + "/v1/chat/completions", json=body) as r:
                result["target"] = r.headers["x-switchyard-target"]
                result["text"] = "".join(r.iter_text())

        t = threading.Thread(target=consume)
        t.start()
        time.sleep(0.1)
        data = cfg.model_dump(mode="json")
        data["routing"]["default"] = "frontier-openai"
        data["routing"]["version"] = "v2"
        path.write_text(yaml.safe_dump(data))
        denied = httpx.post(gw.base_url + "/admin/reload")
        assert denied.status_code == 401
        ok = httpx.post(
            gw.base_url + "/admin/reload", headers={"Authorization": "Bearer admin-secret"}
        )
        assert ok.json()["policy_version"] == "v2"
        t.join(30)
        assert result["target"] == "local"
        assert result["text"].rstrip().endswith("data: [DONE]")
        after = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "x"}]},
        )
        assert after.headers["x-switchyard-target"] == "frontier-openai"
        assert after.headers["x-switchyard-policy-version"] == "v2"
        path.write_text("routing: [not, valid")
        bad = httpx.post(
            gw.base_url + "/admin/reload", headers={"Authorization": "Bearer admin-secret"}
        )
        assert bad.status_code == 400
        assert gw.state.routing.policy.version == "v2"  # the running policy is kept
    finally:
        gw.stop()
        slow.stop()


def test_sighup_reloads_the_config_of_a_running_gateway(frontier_sim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = gateway_config(frontier_sim.base_url).model_dump(mode="json")
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    port = _free_port()
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(path), "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(base, proc)
        body = {"model": "auto", "messages": [{"role": "user", "content": "x"}]}
        assert (
            httpx.post(base + "/v1/chat/completions", json=body).headers["x-switchyard-target"]
            == "local"
        )
        cfg["routing"]["default"] = "frontier-anthropic"
        path.write_text(yaml.safe_dump(cfg))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        target = None
        while time.monotonic() < deadline:
            target = httpx.post(base + "/v1/chat/completions", json=body).headers[
                "x-switchyard-target"
            ]
            if target == "frontier-anthropic":
                break
            time.sleep(0.1)
        assert target == "frontier-anthropic"
    finally:
        proc.terminate()
        # uvicorn shuts down gracefully, then re-raises SIGTERM so the exit status tells why.
        assert proc.wait(30) in (0, -signal.SIGTERM)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "gateway exited"
        try:
            if httpx.get(base + "/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("gateway not ready")
