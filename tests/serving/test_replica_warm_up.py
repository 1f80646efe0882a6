"""A replica counts as ready only after one completion that asks for logprobs: vLLM compiles its
logprobs op lazily, in the engine step of the first such request, and every request waits for
it (serving.replica.WARM_UP). Against a scripted server on loopback standing in for vLLM's API
(the launched process is a sleeper): what the warm-up sends, and that its failure does not
stop the replica from counting as ready."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from serving.replica import VllmReplica
from serving.vllm_config import VllmLaunchConfig
from tests.fixtures.loopback_server import LoopbackServer


class FakeVllm:
    def __init__(self) -> None:
        self.completions: list[dict[str, Any]] = []
        self.status = 200
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/completions", self._completions)
        self.server = LoopbackServer(app, "fake-vllm")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "switchyard-local"}]})

    async def _completions(self, request: web.Request) -> web.Response:
        self.completions.append(await request.json())
        return web.json_response({"choices": []}, status=self.status)


@pytest.fixture
def fake_vllm() -> Iterator[FakeVllm]:
    fake = FakeVllm()
    fake.server.start()
    try:
        yield fake
    finally:
        fake.server.stop()


def _ready(fake: FakeVllm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> VllmReplica:
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr(VllmLaunchConfig, "command", lambda self: sleeper)
    config = VllmLaunchConfig(
        model_dir=tmp_path / "model", cache_dir=tmp_path, port=fake.server.port
    )
    replica = VllmReplica(config)
    replica.start()
    try:
        asyncio.run(replica.wait_ready(timeout=30, poll_interval=0.05))
    finally:
        replica.stop(grace=1)
    return replica


def test_a_replica_is_ready_after_one_completion_that_asks_for_logprobs(
    fake_vllm: FakeVllm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _ready(fake_vllm, tmp_path, monkeypatch)
    (warm_up,) = fake_vllm.completions
    assert warm_up["model"] == "switchyard-local"
    assert warm_up["logprobs"] >= 1 and warm_up["max_tokens"] == 1


def test_a_failed_warm_up_is_logged_and_the_replica_still_ready(
    fake_vllm: FakeVllm,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake_vllm.status = 400
    _ready(fake_vllm, tmp_path, monkeypatch)  # returns: ready
    assert len(fake_vllm.completions) == 1
    assert "warm-up request answered 400" in caplog.text
