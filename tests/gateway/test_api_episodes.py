"""The episode view and export, by admin API and CLI, on agent episodes a real gateway recorded
(SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.cli import main as switchyard
from loadtests.agent.client import AgentClientConfig, run_agent_client
from tasks.agent.tasks import make_agent_task
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway

ADMIN = {"Authorization": "Bearer episodes-admin"}


def _episode(gw: GatewayThread, episode_id: str, steps: int) -> dict[str, Any]:
    """The episode once the writer flushed its steps and its verdict (it batches every 50 ms)."""
    deadline = time.monotonic() + 10
    while True:
        resp = httpx.get(f"{gw.base_url}/admin/episodes/{episode_id}", headers=ADMIN)
        view = resp.json() if resp.status_code == 200 else {}
        flushed = len(view.get("steps", ())) == steps and view["verdict"] is not None
        if flushed or time.monotonic() > deadline:
            return resp.json()  # type: ignore[no-any-return]
        time.sleep(0.1)


def test_episodes_by_admin_api_and_cli(
    frontier_sim: Any,
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "episodes-admin")
    gw = store_gateway(frontier_sim.base_url, store_url, tmp_path / "spool")
    gw.start()
    try:
        tasks = [make_agent_task("fix_bug", 300), make_agent_task("add_import", 301)]
        config = AgentClientConfig(
            gateway=gw.base_url, oracle_url=frontier_sim.base_url, stream="off"
        )
        stats = asyncio.run(run_agent_client(config, tasks))
        assert [e.flavour for e in stats.episodes] == ["chat", "responses"]
        for lived in stats.episodes:
            view = _episode(gw, lived.episode_id, len(lived.steps))
            assert [s["inference_id"] for s in view["steps"]] == [s.request_id for s in lived.steps]
            assert view["verdict"] == ("accepted" if lived.passed else "rejected")
            assert view["consistent"] and view["complete"]
            assert {s["route_kind"] for s in view["steps"]} == {"local"}
            calls = [[c["name"] for c in s["tool_calls"]] for s in view["steps"]]
            assert calls == [[c.name for c in s.calls] for s in lived.steps]
            assert view["summary"]["invalid_tool_calls"] == 0
        first = stats.episodes[0].episode_id
        url = f"{gw.base_url}/admin/episodes/{first}"
        assert httpx.get(url).status_code in (401, 403)
        missing = httpx.get(f"{gw.base_url}/admin/episodes/no-such-episode", headers=ADMIN)
        assert missing.status_code == 404
        out = tmp_path / "api-rl"
        resp = httpx.post(
            f"{gw.base_url}/admin/episodes/export",
            json={"query": {}, "export": {"kind": "episode_rl", "out_dir": str(out),
                                          "split": {"eval_fraction": 0.0}}},
            headers=ADMIN,
        )  # fmt: skip
        assert resp.status_code == 200, resp.text
        assert resp.json()["counts"]["records_built"] == 2
        bad = httpx.post(
            f"{gw.base_url}/admin/episodes/export",
            json={"export": {"kind": "episode_rl", "out_dir": str(out), "colour": "red"}},
            headers=ADMIN,
        )
        assert bad.status_code == 400
    finally:
        gw.stop()

    capsys.readouterr()
    assert switchyard(["traffic", "episode", first, "--store", store_url, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["episode_id"] == first and printed["steps"]
    assert switchyard(["traffic", "episode", first, "--store", store_url]) == 0
    table = capsys.readouterr().out
    assert "verdict:" in table and f"steps {len(stats.episodes[0].steps)} (local" in table
    out_cli = tmp_path / "cli-sft"
    args = ["episode-export", "--store", store_url, "--kind", "episode_sft", "--out", str(out_cli)]
    assert switchyard(["traffic", *args, "--eval-fraction", "0"]) == 0
    counts = json.loads(capsys.readouterr().out.split("\nmanifest:")[0])
    accepted = sum(e.passed for e in stats.episodes)
    assert counts["records_built"] == accepted
    assert len((out_cli / "train.jsonl").read_text().splitlines()) == accepted
