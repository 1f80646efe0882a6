"""The hostile-input fuzz suite (issue 13): seeded, bounded, against a real gateway in-process.

Three parts, each on a gateway with a store (SQLite; the corpus also on PostgreSQL) and API keys
required (keys created through the admin API):

- the corpus of :mod:`loadtests.hostile.corpus` (``COUNT`` cases, seed ``SEED``; every door,
  feedback and admin) against targets on the frontier simulator;
- Hypothesis: an arbitrary JSON value in any field, at any depth, of a valid body of any door
  (``derandomize``: the same examples on every run);
- ``slow``: the corpus against a real vLLM replica on CPU, with no fallback.

Each asserts the targets: no 5xx for bad input, every error in its door's shape, an answer
within 10 s, no breaker leaving ``closed``, bad input refused and valid input served, and
afterwards exactly one record per answered inference request (read back with the store's own
read API).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import parse_config
from loadtests.hostile.case import HostileCase, make_case, valid_body
from loadtests.hostile.corpus import Targets, hostile_corpus
from loadtests.hostile.fire import (
    Credentials,
    Finding,
    GatewayWatch,
    Outcome,
    RecordCheck,
    check_records,
    fire,
    judge,
    repro,
)
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.fixtures.postgres_fixture import PG_URL, pg_dsn
from tests.gateway.conftest import store_gateway
from traffic.store import StoreConfig, open_store

SEED = 13
COUNT = 500
VLLM_COUNT = 120
ADMIN_TOKEN = "hostile-admin"
ALL_DOORS = {"chat", "completions", "responses", "messages", "count_tokens", "feedback", "admin"}
MAX_HEALTH_LATENCY_S = 2.0  # /health stuck longer means the event loop was blocked


@dataclass
class HostileRun:
    outcomes: list[Outcome]
    findings: list[Finding]
    records: RecordCheck
    watch: GatewayWatch

    def of(self, *kinds: str) -> list[Finding]:
        return [f for f in self.findings if f.kind in kinds]


def _report(findings: list[Finding], limit: int = 15) -> str:
    """One repro per distinct (kind, family), for the assertion message."""
    seen: dict[tuple[str, str], int] = {}
    lines: list[str] = []
    for f in findings:
        key = (f.kind, f.outcome.case.family)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] == 1 and len(lines) < limit:
            lines.append(f"{f.kind}: {f.detail[:120]!r}\n    {json.dumps(repro(f.outcome, 300))}")
    return f"{len(findings)} findings, {len(seen)} distinct:\n" + "\n".join(lines)


def _keys(gw: GatewayThread) -> Credentials:
    auth = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    keys = []
    for name in ("hostile-a", "hostile-b"):
        r = httpx.post(gw.base_url + "/admin/keys", json={"name": name}, headers=auth)
        assert r.status_code == 201, r.text
        keys.append(r.json()["key"])
    return Credentials(keys[0], keys[1], ADMIN_TOKEN)


async def _stored(url: str) -> list[tuple[str, int]]:
    backend = open_store(StoreConfig(url=url))
    await backend.connect()
    try:
        return [(r.inference.id, r.inference.status) async for r in backend.iter_inferences()]
    finally:
        await backend.close()


@pytest.fixture
def admin_token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
    return ADMIN_TOKEN


def _hostile_run(gw: GatewayThread, url: str, cases: Iterable[HostileCase]) -> HostileRun:
    """Fire ``cases`` at the started ``gw``, stop it (its writer flushes), read the store."""
    try:
        creds = _keys(gw)
        with GatewayWatch(gw.base_url) as watch:
            outcomes = asyncio.run(fire(gw.base_url, cases, creds))
    finally:
        gw.stop()
    findings = [f for o in outcomes for f in judge(o)]
    return HostileRun(outcomes, findings, check_records(outcomes, asyncio.run(_stored(url))), watch)


@contextlib.contextmanager
def _store_url(kind: str, tmp: Path) -> Iterator[str]:
    """The store a run records into: a SQLite file, or a fresh PostgreSQL schema (dropped after;
    the fleet's store, where a NUL in a filter or an id once reached the database as a 500)."""
    if kind == "sqlite":
        yield f"sqlite:///{tmp / 'traffic.db'}"
        return
    schema = f"hostile_{uuid.uuid4().hex[:10]}"
    try:
        with psycopg.connect(PG_URL, connect_timeout=3, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
    except psycopg.OperationalError as e:
        pytest.skip(f"PostgreSQL not reachable at {PG_URL}: {e}".splitlines()[0])
    try:
        yield pg_dsn(schema)
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def sim_run(
    request: pytest.FixtureRequest, frontier_sim: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostileRun]:
    with (
        pytest.MonkeyPatch.context() as mp,
        _store_url(request.param, tmp_path_factory.mktemp("hostile")) as url,
    ):
        mp.setenv("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
        spool = tmp_path_factory.mktemp("hostile-spool")
        gw = store_gateway(frontier_sim.base_url, url, spool, auth={"required": True})
        yield _hostile_run(gw.start(), url, hostile_corpus(SEED, COUNT))


def test_the_corpus_is_seeded_and_covers_every_door_and_family() -> None:
    first = list(hostile_corpus(SEED, COUNT))
    assert first == list(hostile_corpus(SEED, COUNT))
    assert list(hostile_corpus(SEED + 1, 50)) != first[:50]
    assert {c.door for c in first} == ALL_DOORS
    families = {c.family.split(".")[0] for c in first}
    assert families >= {
        "valid", "wrong_type", "missing_field", "deep_nesting", "huge_string", "odd_prompt",
        "bad_encoding", "non_object_json", "truncated_json", "content_type", "numbers",
        "unknown_model", "auth", "door_quirks", "feedback", "admin", "disconnect",
    }  # fmt: skip
    assert sum(c.expect == "2xx" for c in first) > COUNT // 10  # valid traffic interleaved


def test_bad_input_never_gets_a_5xx(sim_run: HostileRun) -> None:
    assert not sim_run.of("5xx"), _report(sim_run.of("5xx"))


def test_every_error_comes_in_its_door_shape(sim_run: HostileRun) -> None:
    assert not sim_run.of("bad_shape"), _report(sim_run.of("bad_shape"))


def test_every_request_is_answered_within_10_s(sim_run: HostileRun) -> None:
    assert not sim_run.of("hang", "no_answer"), _report(sim_run.of("hang", "no_answer"))


def test_bad_input_is_refused_and_valid_input_served(sim_run: HostileRun) -> None:
    wrong = sim_run.of("accepted_bad_input", "refused_valid", "no_request_id", "stream_error")
    assert not wrong, _report(wrong)


def test_no_breaker_leaves_closed(sim_run: HostileRun) -> None:
    assert sim_run.watch.breaker_max, "no switchyard_breaker_state in /metrics"
    assert not sim_run.watch.breaker_opened, sim_run.watch.breaker_max


def test_every_answered_request_has_exactly_one_record(sim_run: HostileRun) -> None:
    rc = sim_run.records
    assert rc.answered > COUNT // 3
    assert rc.ok, rc.summary()
    assert sorted(rc.orphans.values()) == [499] * rc.disconnects, rc.summary()


def test_the_event_loop_keeps_answering_health(sim_run: HostileRun) -> None:
    lag = sim_run.watch.lag()
    assert lag["probes"] > 0 and lag["failures"] == 0, lag
    stalls = sim_run.watch.stalls(sim_run.outcomes, MAX_HEALTH_LATENCY_S)
    assert lag["max_ms"] < MAX_HEALTH_LATENCY_S * 1000, (lag, stalls)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=25,
)
BODY_DOORS = ("chat", "completions", "responses", "messages", "count_tokens", "feedback", "admin")


def _field_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    items = node.items() if isinstance(node, dict) else enumerate(node)
    out: list[tuple[Any, ...]] = []
    for key, child in items:
        out.append((*prefix, key))
        if isinstance(child, dict | list):
            out += _field_paths(child, (*prefix, key))
    return out


def test_any_json_value_in_any_field_is_refused_or_served(
    frontier_sim: Any, tmp_path: Path, admin_token: str
) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool", auth={"required": True})
    gw.start()
    outcomes: list[Outcome] = []
    try:
        creds = _keys(gw)

        @settings(
            max_examples=150,
            derandomize=True,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(door=st.sampled_from(BODY_DOORS), seed=st.integers(0, 50), data=st.data())
        def probe(door: Any, seed: int, data: st.DataObject) -> None:
            body = valid_body(door, random.Random(seed), Targets())
            if door == "feedback":
                body["inference_id"] = "01890a5d-ac96-7c3d-8000-000000000000"
            path = data.draw(st.sampled_from(_field_paths(body)), label="path")
            parent: Any = body
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = data.draw(JSON_VALUES, label="value")
            case = make_case(door, f"hypothesis.{path}", json.dumps(body).encode(), "not5xx")
            (outcome,) = asyncio.run(fire(gw.base_url, [case], creds, concurrency=1))
            outcomes.append(outcome)
            found = judge(outcome)
            assert not found, _report(found)

        probe()
    finally:
        gw.stop()
    records = check_records(outcomes, asyncio.run(_stored(url)))
    assert records.ok, records.summary()


@pytest.mark.slow
def test_hostile_requests_to_a_vllm_target(
    vllm_replica: Any, frontier_sim: Any, tmp_path: Path, admin_token: str
) -> None:
    """The corpus routed to a real vLLM replica (no fallback: its answers reach the client)."""
    data = gateway_config(frontier_sim.base_url).model_dump(mode="json")
    data["backends"]["vllm"] = {
        "kind": "vllm",
        "model": vllm_replica.served_model_name,
        "replicas": [vllm_replica.base_url],
    }
    data["routing"]["aliases"]["vllm-local"] = "vllm"
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    data["store"] = {"enabled": True, "url": url, "spool_dir": str(tmp_path / "spool")}
    data["auth"] = {"required": True}
    gw = GatewayThread(parse_config(data), use_store=True).start()
    only = ("vllm-local",)
    targets = Targets(only, only, only, only)
    run = _hostile_run(gw, url, hostile_corpus(SEED, VLLM_COUNT, targets))
    assert not run.findings, _report(run.findings)
    assert not run.watch.breaker_opened, run.watch.breaker_max
    assert run.records.ok, run.records.summary()
    assert sorted(run.records.orphans.values()) == [499] * run.records.disconnects
