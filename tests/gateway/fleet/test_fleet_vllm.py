"""The fleet in front of a real vLLM replica: a drain posted to one gateway stops every gateway
sending the replica new work (judged by vLLM's own request counter, not by the gateways'), and
a conversation's turns stay on one replica whichever gateway receives them.

Three real gateway processes on one Redis fleet and one PostgreSQL schema; the local target is
cache-aware over the session's vLLM CPU replica (``tests/fixtures/vllm_fixture.py``) and a
simulated replica (a second vLLM boot would double this test's cost; ``make bench-fleet``'s
``vllm`` part runs two vLLM replicas).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from serving.names import LOCAL_MODEL_NAME
from tests.fixtures.vllm_fixture import RunningVllm
from tests.gateway.fleet.harness import (
    EPISODE,
    Fleet,
    Load,
    RoundRobin,
    check_drain_stops_new_work,
    running_fleet,
)

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

SUCCESS = "vllm:request_success_total"


def vllm_requests(base_url: str) -> float:
    """Requests the replica has finished, from its own ``/metrics`` (every finish reason)."""
    text = httpx.get(base_url + "/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((SUCCESS + "{", SUCCESS + " "))
    )


@pytest.fixture(scope="module")
def vllm_fleet(
    vllm_replica: RunningVllm, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fleet]:
    def served_model(_: int, config: dict[str, Any]) -> None:
        for backend in config["backends"].values():
            backend["model"] = vllm_replica.served_model_name

    sim: ThreadedSimulator = run_in_thread(SimulatorConfig())
    work = tmp_path_factory.mktemp("fleet-vllm")
    replicas = [vllm_replica.base_url, sim.base_url]
    try:
        with running_fleet(
            3, replicas, vllm_replica.model_dir, work, "fleet-vllm", served_model
        ) as f:
            yield f
    finally:
        sim.stop()


def _context(session: int) -> str:
    return f"# module {session}\n" + "".join(
        f"def f_{session}_{i}(x):\n    return x * {i + session}\n" for i in range(24)
    )


def test_a_conversation_stays_on_one_replica_through_any_gateway(vllm_fleet: Fleet) -> None:
    # First in the module, on an idle replica: after the drain test's load the load guard (a home
    # more than two requests busier than another replica is left, by design) may read vLLM's
    # last scraped queue and place a turn elsewhere.
    client = RoundRobin(vllm_fleet.urls, timeout_s=120)
    placed: dict[int, set[str]] = {}
    try:
        for turn in range(3):
            for session in range(4):  # 4 sessions, 3 gateways: each turn through another one
                messages = [{"role": "system", "content": _context(session)}]
                for t in range(turn + 1):
                    messages.append({"role": "user", "content": f"turn {t} of {session}"})
                    if t < turn:
                        messages.append({"role": "assistant", "content": f"answer {t}"})
                body = {"model": LOCAL_MODEL_NAME, "messages": messages, "max_tokens": 4}
                headers = {EPISODE: f"vllm-session-{session}"}
                _, r = client.post("/v1/chat/completions", body, headers)
                assert r.status_code == 200, r.text
                placed.setdefault(session, set()).add(r.headers["x-switchyard-replica"])
    finally:
        client.close()
    assert all(len(replicas) == 1 for replicas in placed.values()), placed


def test_a_drain_through_one_gateway_stops_every_gateway_sending_vllm_new_work(
    vllm_fleet: Fleet, vllm_replica: RunningVllm
) -> None:
    with Load(vllm_fleet, max_tokens=4, timeout_s=120) as load:
        check_drain_stops_new_work(
            vllm_fleet, vllm_replica.base_url, vllm_requests, "w-vllm-2", load, timeout_s=120
        )
