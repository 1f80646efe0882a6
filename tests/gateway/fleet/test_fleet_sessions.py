"""KV-aware choice across gateways: a conversation's turns land on one replica whichever gateway
receives them, because every gateway applies the others' cache-aware decisions (prefix blocks,
the session's home) as its own.

Three real gateway processes (package fixture), cache-aware over two simulated replicas, the
demo model's tokenizer hashing prompts into vLLM's blocks; the target is one that no other
test sends to (``harness.SESSIONS``: why), with the share guard on as by default.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.gateway.fleet.harness import SESSIONS, Fleet, RoundRobin

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

N_SESSIONS = 10  # not a multiple of the gateways: each turn comes through another one
TURNS = 4


def _context(session: int) -> str:
    return f"# project {session}\n" + "".join(
        f"def step_{session}_{i}(x):\n    return x + {i * session}\n" for i in range(40)
    )


def test_a_sessions_turns_stay_on_one_replica_through_any_gateway(fleet: Fleet) -> None:
    client = RoundRobin(fleet.urls)
    placed: dict[int, set[str]] = defaultdict(set)
    via: dict[int, set[int]] = defaultdict(set)
    try:
        for turn in range(TURNS):
            for session in range(N_SESSIONS):  # interleaved: consecutive turns, other gateways
                messages = [{"role": "system", "content": _context(session)}]
                for t in range(turn + 1):
                    messages.append({"role": "user", "content": f"turn {t} of {session}"})
                    if t < turn:
                        messages.append({"role": "assistant", "content": f"answer {t}"})
                body = {"model": SESSIONS, "messages": messages}
                headers = {"x-switchyard-episode": f"fleet-session-{session}"}
                gateway, r = client.post("/v1/chat/completions", body, headers)
                assert r.status_code == 200, r.text
                placed[session].add(r.headers["x-switchyard-replica"])
                via[session].add(gateway)
    finally:
        client.close()
    assert all(len(gateways) == len(fleet.gateways) for gateways in via.values())
    assert all(len(replicas) == 1 for replicas in placed.values()), dict(placed)
    assert len(set().union(*placed.values())) == 2  # sessions spread over both replicas
    received = [g.metric("switchyard_fleet_routed_received") or 0.0 for g in fleet.gateways]
    assert all(n > 0 for n in received)
