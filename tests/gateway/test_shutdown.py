"""SIGTERM with requests longer than the drain deadline: each one ends with an answer in its
door's shape (or its stream's error event), carries its request id, and is recorded exactly once.

A real gateway process (``python -m gateway``) on a SQLite store, in front of the frontier
simulator made slow through its ``x-sim-*`` headers (sent by the back-ends' ``extra_headers``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from loadtests.bench.servers import free_port
from traffic.store import InferenceFilter, StoreConfig, open_store

REPO = Path(__file__).resolve().parents[2]


def _config(sim_url: str, tmp_path: Path, port: int) -> dict[str, Any]:
    def slow(**headers: str) -> dict[str, Any]:
        return {
            "kind": "litellm",
            "model": "openai/gpt-4o-mini",
            "api_base": sim_url + "/v1",
            "extra_headers": headers,
        }

    return {
        "gateway": {"listen": {"port": port}, "limits": {"drain_timeout_s": 1.0}},
        "backends": {
            "slow-first-byte": slow(**{"x-sim-ttft-ms": "8000"}),
            "slow-stream": slow(**{"x-sim-tokens-per-s": "2"}),
        },
        "routing": {
            "default": "slow-first-byte",
            "aliases": {"slow": "slow-first-byte", "trickle": "slow-stream"},
        },
        "store": {"url": f"sqlite:///{tmp_path / 'traffic.db'}", "spool_dir": str(tmp_path)},
        "auth": {"required": False},
    }


@pytest.fixture
def gateway_process(
    frontier_sim: Any, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    cfg = tmp_path / "switchyard.yaml"
    cfg.write_text(yaml.safe_dump(_config(frontier_sim.base_url, tmp_path, port)))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "--config", str(cfg)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"gateway exited: {proc.stderr.read() if proc.stderr else ''}")
            try:
                if httpx.get(base + "/ready", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise AssertionError("gateway never became ready")
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _rows(db: Path) -> list[Any]:
    async def read() -> list[Any]:
        backend = open_store(StoreConfig(url=f"sqlite:///{db}"))
        await backend.connect()
        try:
            return [row.inference async for row in backend.iter_inferences(InferenceFilter())]
        finally:
            await backend.close()

    return asyncio.run(read())


def _unary(base: str, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=30)


def _stream(base: str, path: str, body: dict[str, Any]) -> tuple[httpx.Response, str]:
    with httpx.stream("POST", base + path, json=body, timeout=30) as r:
        text = "".join(r.iter_text())
    return r, text


CHAT = {"messages": [{"role": "user", "content": "take your time"}]}
MESSAGES = {"max_tokens": 64, "messages": [{"role": "user", "content": "take your time"}]}


def test_sigterm_past_the_drain_deadline_answers_and_records_every_request(
    gateway_process: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    proc, base = gateway_process
    with ThreadPoolExecutor(4) as pool:
        chat = pool.submit(_unary, base, "/v1/chat/completions", {"model": "slow", **CHAT})
        anthropic = pool.submit(_unary, base, "/v1/messages", {"model": "slow", **MESSAGES})
        chat_stream = pool.submit(
            _stream, base, "/v1/chat/completions", {"model": "trickle", "stream": True, **CHAT}
        )
        messages_stream = pool.submit(
            _stream, base, "/v1/messages", {"model": "trickle", "stream": True, **MESSAGES}
        )
        time.sleep(1.5)  # all four in flight: first bytes of the streams already sent
        proc.send_signal(signal.SIGTERM)
        answers = [chat.result(), anthropic.result()]
        streams = [chat_stream.result(), messages_stream.result()]
    assert proc.wait(30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
    stderr = proc.stderr.read() if proc.stderr else ""

    unary_chat, unary_messages = answers
    assert unary_chat.status_code == 503
    assert unary_chat.json()["error"]["code"] == "server_shutting_down"
    assert unary_messages.status_code == 503
    assert unary_messages.json()["type"] == "error"  # Anthropic's error shape
    assert unary_messages.json()["error"]["type"] == "overloaded_error"
    (chat_resp, chat_text), (msg_resp, msg_text) = streams
    assert chat_resp.status_code == 200 and "server_shutting_down" in chat_text
    assert "[DONE]" not in chat_text
    assert msg_resp.status_code == 200 and "event: error" in msg_text
    assert "message_stop" not in msg_text

    ids = [r.headers["x-request-id"] for r in (*answers, chat_resp, msg_resp)]
    rows = _rows(tmp_path / "traffic.db")
    recorded = [r.id for r in rows]
    assert sorted(recorded) == sorted(ids), "every request recorded exactly once"
    assert {r.status for r in rows} == {503}
    assert "Traceback" not in stderr
    # litellm's per-call INFO line is not logged (it was, twice: its handler and the root's)
    assert "completion() model=" not in stderr
