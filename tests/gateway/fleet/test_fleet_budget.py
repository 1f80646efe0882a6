"""A key's budget holds across the fleet: with calls reserved before and settled after in Redis,
three gateways serving one key concurrently use its budget (less at most what the reservations
of calls in flight overestimated) and overshoot it by no more than the calls in flight, and the
durable spend (PostgreSQL) ends equal to what the answers cost.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from tests.gateway.fleet.harness import Fleet, RoundRobin, pg_dsn, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

IN_FLIGHT = 6  # client threads, each with one call at a time


def test_concurrent_calls_through_three_gateways_overshoot_by_at_most_the_calls_in_flight(
    fleet: Fleet,
) -> None:
    probe_client = RoundRobin(fleet.urls)
    _, probe = probe_client.chat("price probe " * 20)
    probe_client.close()
    cost = float(probe.headers["x-switchyard-cost-usd"])
    assert cost > 0
    budget = 12 * cost  # a dozen calls' worth
    key = fleet.gateways[0].admin("POST", "/admin/keys", {"name": "fleet", "budget_usd": budget})

    answered: list[float] = []
    refused: list[int] = []
    lock = threading.Lock()

    def spend(worker: int) -> None:
        client = RoundRobin(fleet.urls[worker % 3 :] + fleet.urls[: worker % 3])
        try:
            for turn in range(40):
                _, r = client.chat(f"price probe {worker} {turn} " * 10, key=key["key"])
                with lock:
                    if r.status_code == 200:
                        answered.append(float(r.headers["x-switchyard-cost-usd"]))
                    elif r.status_code == 403:
                        assert r.json()["error"]["code"] == "budget_exceeded"
                        refused.append(worker)
                        return
                    else:
                        raise AssertionError(r.text)
        finally:
            client.close()

    threads = [threading.Thread(target=spend, args=(w,)) for w in range(IN_FLIGHT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(refused) == IN_FLIGHT  # every client was stopped by the budget
    spent = sum(answered)
    # The budget was used: the last refusal came when settled spend plus the reservations still
    # held (each the key's running mean cost, released when its exchange settles, which may be
    # just after its client has the answer) reached the budget, so what is left unused is at
    # most what those reservations overestimated: the spread of one call's cost per call in flight.
    spread = max(answered) - min(answered)
    assert spent >= budget - IN_FLIGHT * spread
    assert spent - budget <= IN_FLIGHT * max(answered)  # ... and overshot by the calls in flight

    def stored() -> float:
        with psycopg.connect(pg_dsn(fleet.schema)) as conn:
            row = conn.execute("SELECT spent_usd FROM api_key WHERE id = %s", (key["id"],))
            return float(row.fetchone()[0])  # type: ignore[index]

    # Every gateway's spend reached the durable record: no more, no less than the answers cost.
    wait_until(lambda: abs(stored() - spent) < 1e-9, 10, "the spend is in PostgreSQL")
