"""The simulated IDE client sends what a real client sends; its bookkeeping stays on its side."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from loadtests.frontier_sim import SimulatorConfig, run_in_thread
from loadtests.frontier_sim.runner import ThreadedSimulator
from loadtests.ide_client import IdeClientConfig, RunStats, build_parser, run_ide_client
from tasks.ide import CLIENT_TYPES, FAMILIES, client_profile, sample_tasks, task_from_id
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config

ORACLE_ACCURACY = 0.8
# What any HTTP client library adds by itself; nothing else may reach the gateway.
PLAIN_HEADERS = {
    "host",
    "user-agent",
    "content-type",
    "content-length",
    "accept",
    "accept-encoding",
}


@dataclass
class Captured:
    """What a stand-in gateway received: chat requests by the request id it gave, feedback."""

    chats: dict[str, tuple[dict[str, str], dict[str, Any]]] = field(default_factory=dict)
    feedback: list[tuple[dict[str, str], dict[str, Any]]] = field(default_factory=list)


async def _capture_and_run(sim_url: str, config: dict[str, Any]) -> tuple[RunStats, Captured]:
    """Run the client against a stand-in gateway that records everything and asks ``sim_url``."""
    captured = Captured()
    upstream_session = aiohttp.ClientSession()

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        request_id = uuid.uuid4().hex
        captured.chats[request_id] = (dict(request.headers), body)
        url = f"{sim_url}/v1/chat/completions"
        async with upstream_session.post(url, json=body) as upstream:
            answer = await upstream.json()
        return web.json_response(answer, headers={"x-request-id": request_id})

    async def feedback(request: web.Request) -> web.Response:
        captured.feedback.append((dict(request.headers), await request.json()))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/feedback", feedback)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        stats = await run_ide_client(IdeClientConfig(base_url=f"http://127.0.0.1:{port}", **config))
    finally:
        await runner.cleanup()
        await upstream_session.close()
    return stats, captured


@pytest.mark.parametrize("client", CLIENT_TYPES)
def test_client_requests_carry_no_family_task_or_split(frontier_sim: Any, client: str) -> None:
    config = {"n": 24, "seed": 3, "client": client, "oracle_url": frontier_sim.base_url}
    stats, captured = asyncio.run(_capture_and_run(frontier_sim.base_url, config))
    tasks = sample_tasks(24, 3, "train")
    assert stats.total().sent == 24 and stats.total().errors == 0
    assert stats.oracle_registered == 24 and stats.total().accepted >= 18  # oracle: 97% right

    profile = client_profile(client)
    expected_keys = {"model", "messages", "max_tokens", "temperature"}
    ids_and_families = {t.task_id for t in tasks} | set(FAMILIES)
    identities = ids_and_families | {"train", "heldout", "split"}
    for headers, body in captured.chats.values():
        assert {h.lower() for h in headers} <= PLAIN_HEADERS
        assert set(body) == expected_keys | ({"tools"} if profile.tools else set())
        assert body["messages"][0] == {"role": "system", "content": profile.system_prompt}
        text = json.dumps(body["messages"])
        assert "# task:" not in text and not any(t.task_id in text for t in tasks)
        around = json.dumps({k: v for k, v in body.items() if k != "messages"} | headers)
        assert not any(word in around for word in identities)
    tool_lists = {json.dumps(body.get("tools")) for _, body in captured.chats.values()}
    assert tool_lists == {json.dumps([dict(t) for t in profile.tools] or None)}

    kinds = [body["kind"] for _, body in captured.feedback]
    assert kinds.count("accepted") == stats.total().accepted
    assert kinds.count("rejected") == stats.total().rejected
    for headers, body in captured.feedback:
        assert {h.lower() for h in headers} <= PLAIN_HEADERS
        assert set(body) <= {"inference_id", "kind", "payload"}
        assert set(body.get("payload") or {}) <= {"reason", "text"}
        assert not any(word in json.dumps(body) for word in ids_and_families)


def test_client_bookkeeping_joins_request_ids_to_families(frontier_sim: Any) -> None:
    config = {"n": 30, "seed": 8, "oracle_url": frontier_sim.base_url}
    stats, captured = asyncio.run(_capture_and_run(frontier_sim.base_url, config))
    assert set(stats.sent) == set(captured.chats)
    for request_id, (_, body) in captured.chats.items():
        sent = stats.sent[request_id]
        task = task_from_id(sent.task_id)
        assert sent.family == task.family
        assert body["messages"][-1]["content"] == task.user_prompt()
    by_family: dict[str, int] = {}
    for sent in stats.sent.values():
        by_family[sent.family] = by_family.get(sent.family, 0) + 1
    assert by_family == {name: s.sent for name, s in stats.families.items()}
    accepted = sum(s.verdict.passed for s in stats.sent.values())
    assert accepted == stats.total().accepted
    assert json.loads(json.dumps(stats.as_dict()))["sent"].keys() == stats.sent.keys()
    merged = RunStats()
    merged.merge(stats)
    merged.merge(stats)
    assert merged.sent == stats.sent and merged.total().sent == 60


def test_a_failed_oracle_registration_is_counted_and_answered_by_default(
    frontier_sim: Any,
) -> None:
    config = {"n": 2, "seed": 1, "oracle_url": "http://127.0.0.1:9", "edit_share": 0.0}
    stats, captured = asyncio.run(_capture_and_run(frontier_sim.base_url, config))
    assert stats.oracle_failed == 2 and stats.oracle_registered == 0
    assert stats.last_oracle_error is not None
    assert stats.total().sent == 2 and stats.total().rejected == 2
    reasons = [body["payload"]["reason"] for _, body in captured.feedback]
    assert len(reasons) == 2 and all(0 < len(r) <= 200 for r in reasons)


@pytest.fixture(scope="module")
def oracle_sim() -> Iterator[ThreadedSimulator]:
    sim = run_in_thread(SimulatorConfig(oracle_accuracy=ORACLE_ACCURACY))
    try:
        yield sim
    finally:
        sim.stop()


def _gateway(sim: ThreadedSimulator, db: Path) -> GatewayThread:
    store = {"enabled": True, "url": f"sqlite:///{db}", "spool_dir": str(db.parent / "spool")}
    return GatewayThread(gateway_config(sim.base_url, store=store), use_store=True).start()


def test_ide_client_through_gateway_posts_feedback(
    oracle_sim: ThreadedSimulator, tmp_path: Path
) -> None:
    db = tmp_path / "traffic.db"
    gateway = _gateway(oracle_sim, db)
    try:
        config = IdeClientConfig(
            base_url=gateway.base_url,
            n=40,
            seed=11,
            model="gpt-4o-mini",
            edit_share=1.0,
            oracle_url=oracle_sim.base_url,
        )
        stats = asyncio.run(run_ide_client(config))
        local = asyncio.run(
            run_ide_client(IdeClientConfig(base_url=gateway.base_url, n=6, seed=12, edit_share=0))
        )
    finally:
        gateway.stop()
    total = stats.total()
    assert total.sent == 40 and total.errors == 0
    assert total.accepted + total.rejected == 40
    assert 0 < total.accepted < 40 and stats.oracle_registered == 40
    assert total.rejected > 0 and total.edited == total.rejected  # edit_share=1.0
    assert dict(total.targets) == {"frontier-openai": 40}
    assert total.latency_p50_ms is not None and total.latency_p50_ms > 0
    assert json.loads(json.dumps(stats.as_dict()))["total"]["sent"] == 40
    assert stats.feedback_failed == 0
    assert stats.feedback_posted == 40 + total.edited
    assert local.total().targets["local"] == 6  # default route of the test gateway
    assert local.total().accepted == 0  # no oracle_url: the simulator never knew these tasks

    rows = sqlite3.connect(db)
    kinds = dict(rows.execute("SELECT kind, COUNT(*) FROM feedback GROUP BY kind").fetchall())
    assert kinds.get("accepted", 0) == total.accepted
    assert kinds.get("edited", 0) == total.edited
    edited = rows.execute("SELECT payload FROM feedback WHERE kind = ?", ("edited",))
    edits = [json.loads(payload) for (payload,) in edited]
    assert all(e["text"].startswith("```") or "\n" not in e["text"] for e in edits)
    recorded = rows.execute("SELECT id, tags, episode_id FROM inference").fetchall()
    assert all(json.loads(tags) == {} and episode is None for _, tags, episode in recorded)
    # The gateway's record ids join to families through the client's bookkeeping only.
    ids = {rid for rid, _, _ in recorded}
    assert set(stats.sent) | set(local.sent) == ids
    assert {stats.sent[rid].family for rid in stats.sent} == set(stats.families)


def test_feedback_failures_are_counted_without_a_store(
    oracle_sim: ThreadedSimulator,
) -> None:
    gateway = GatewayThread(gateway_config(oracle_sim.base_url)).start()
    try:
        config = IdeClientConfig(base_url=gateway.base_url, n=3, seed=1, model="gpt-4o-mini")
        stats = asyncio.run(run_ide_client(config))
    finally:
        gateway.stop()
    assert stats.total().sent == 3
    assert stats.feedback_posted == 0 and stats.feedback_failed >= 3
    assert stats.last_feedback_error is not None and stats.last_feedback_error.startswith("404")


def test_agent_client_through_gateway_is_answered_in_text(oracle_sim: ThreadedSimulator) -> None:
    gateway = GatewayThread(gateway_config(oracle_sim.base_url)).start()
    try:
        config = IdeClientConfig(
            base_url=gateway.base_url,
            n=12,
            seed=2,
            client="agent",
            model="gpt-4o-mini",
            oracle_url=oracle_sim.base_url,
            send_feedback=False,
        )
        stats = asyncio.run(run_ide_client(config))
    finally:
        gateway.stop()
    # The tools pass through the gateway; the oracle answers the registered tasks in text.
    assert stats.total().errors == 0 and stats.oracle_registered == 12
    assert stats.total().accepted >= 6


def test_cli_flags_come_from_the_config() -> None:
    argv = ["--base-url", "http://x", "--n", "5", "--client", "agent", "--oracle-url", "http://s"]
    config = IdeClientConfig(**vars(build_parser().parse_args(argv)))
    assert config.n == 5 and config.client == "agent" and config.oracle_url == "http://s"
    assert (
        IdeClientConfig(**vars(build_parser().parse_args(["--base-url", "x"]))).oracle_url is None
    )
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--base-url", "x", "--client", "vim"])
    with pytest.raises(ValueError, match="concurrency"):
        IdeClientConfig(base_url="http://x", concurrency=0)
    with pytest.raises(ValueError, match="client type"):
        IdeClientConfig(base_url="http://x", client="vim")  # type: ignore[arg-type]
