"""The read side on real recorded traffic: summaries and dataset exports, by CLI and admin API,
on SQLite and PostgreSQL; the exported files load with `datasets`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.cli import main as cli_main
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway

ADMIN = {"Authorization": "Bearer read-side-admin"}


def _drive_traffic(gw: GatewayThread) -> dict[str, list[str]]:
    """Local and frontier answers with accepted, rejected and edited feedback."""
    ids: dict[str, list[str]] = {"accepted": [], "rejected": [], "edited": []}
    kinds = ["accepted", "rejected", "edited"]
    for i in range(9):
        model = "auto" if i % 2 else "gpt-4o-mini"
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": "You are a coding assistant."},
                {
                    "role": "user",
                    "content": f"Task {i}: rename x to y in `x = {i}`; "
                    f"mail me at dev{i}@acme-corp.io",
                },
            ],
            "metadata": {"task_family": "rename"},
        }
        r = httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30)
        assert r.status_code == 200
        rid = r.headers["x-request-id"]
        kind = kinds[i % 3]
        fb: dict[str, Any] = {"inference_id": rid, "kind": kind}
        if kind == "edited":
            fb["payload"] = {"text": f"y = {i}"}
        assert httpx.post(gw.base_url + "/v1/feedback", json=fb).status_code == 200
        ids[kind].append(rid)
    return ids


def test_summary_and_exports_from_recorded_traffic(
    frontier_sim: Any,
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "read-side-admin")
    gw = store_gateway(frontier_sim.base_url, store_url, tmp_path / "spool").start()
    try:
        ids = _drive_traffic(gw)
        assert len(ids["edited"]) == 3
        time.sleep(0.5)  # admin API while the gateway runs; the writer flushes every 50 ms
        resp = httpx.get(
            gw.base_url + "/admin/traffic/summary", params={"by": "route_target"}, headers=ADMIN
        )
        assert resp.status_code == 200, resp.text
        groups = {g["route_target"]: g for g in resp.json()["data"]}
        assert groups["local"]["count"] + groups["frontier-openai"]["count"] == 9
        assert httpx.get(gw.base_url + "/admin/traffic/summary").status_code in (401, 403)
        out_api = tmp_path / "api-sft"
        resp = httpx.post(
            gw.base_url + "/admin/traffic/export",
            json={
                "query": {"tags": {"task_family": "rename"}},
                "export": {
                    "kind": "sft",
                    "out_dir": str(out_api),
                    "formats": ["jsonl"],
                    "split": {"eval_fraction": 0.0},
                },
            },
            headers=ADMIN,
            timeout=60,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["counts"]["train"] == 6  # accepted + edited
    finally:
        gw.stop()

    assert (
        cli_main(["traffic", "summary", "--store", store_url, "--by", "route_target", "--json"])
        == 0
    )
    summary = json.loads(capsys.readouterr().out)
    total = sum(g["count"] for g in summary)
    assert total == 9
    local = next(g for g in summary if g["route_target"] == "local")
    assert local["latency_ms_p50"] is not None

    out = tmp_path / "sft"
    assert (
        cli_main(
            [
                "traffic",
                "export",
                "--store",
                store_url,
                "--kind",
                "sft",
                "--out",
                str(out),
                "--format",
                "jsonl,parquet",
                "--eval-fraction",
                "0",
            ]
        )
        == 0
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["train"] == 6
    assert manifest["pii"].get("email", 0) >= 6
    lines = [json.loads(x) for x in (out / "train.jsonl").read_text().splitlines()]
    assert all(x["messages"][-1]["role"] == "assistant" for x in lines)
    assert not any("@acme-corp.io" in json.dumps(x) for x in lines)
    edited_answers = {x["messages"][-1]["content"] for x in lines}
    assert {"y = 2", "y = 5", "y = 8"} <= edited_answers

    import datasets

    from_json = datasets.load_dataset("json", data_files=str(out / "train.jsonl"))["train"]
    from_parquet = datasets.load_dataset("parquet", data_files=str(out / "train.parquet"))["train"]
    assert len(from_json) == len(from_parquet) == 6

    pref = tmp_path / "pref"
    assert (
        cli_main(
            [
                "traffic",
                "export",
                "--store",
                store_url,
                "--kind",
                "preference_trl",
                "--out",
                str(pref),
                "--eval-fraction",
                "0",
            ]
        )
        == 0
    )
    pairs = [json.loads(x) for x in (pref / "train.jsonl").read_text().splitlines()]
    assert pairs and all({"prompt", "chosen", "rejected"} <= set(p) for p in pairs)
    rl = tmp_path / "rl"
    assert (
        cli_main(
            [
                "traffic",
                "export",
                "--store",
                store_url,
                "--kind",
                "rl_prompts",
                "--out",
                str(rl),
                "--eval-fraction",
                "0",
            ]
        )
        == 0
    )
    assert (rl / "train.jsonl").read_text().count("\n") == 9


def _error(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error: dict[str, Any] = resp.json()["error"]  # the OpenAI error shape, never a plain page
    assert error["message"]
    return error


def test_bad_filters_names_and_ids_are_refused_alike_on_every_store(
    frontier_sim: Any, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NUL cannot be stored on PostgreSQL (its text refuses it), nor 2**63 in its bigint: a
    filter, a name or an id holding one is a 400 or a 404 on both stores, never the database's
    error as a 500."""
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "read-side-admin")
    with store_gateway(frontier_sim.base_url, store_url, tmp_path / "spool") as gw:
        client = httpx.Client(base_url=gw.base_url, headers=ADMIN, timeout=30)
        summary = "/admin/traffic/summary"
        for query in ("route_target=%00", "tag=task%00=x", "tag=k=v%00", "endpoint=a%00b&by=day"):
            assert "NUL" in _error(client.get(f"{summary}?{query}"), 400)["message"]
        # A tag filter that is not key=value used to be dropped: the whole traffic answered.
        assert _error(client.get(f"{summary}?tag=rename"), 400)["param"] == "tag"
        export = {"query": {"route_target": "\x00"}, "export": {"kind": "sft", "out_dir": "x"}}
        _error(client.post("/admin/traffic/export", json=export), 400)
        _error(client.post("/admin/keys", json={"name": "ops\x00key"}), 400)
        _error(client.post("/admin/keys", json={"name": "a" * 201}), 400)
        _error(client.post("/admin/keys", json={"name": "big", "rpm_limit": 2**63}), 400)
        _error(client.post("/admin/keys/%00/revoke"), 404)
        fb = {"inference_id": "\x00", "kind": "accepted"}
        assert _error(client.post("/v1/feedback", json=fb), 404)["code"] == "inference_not_found"
        assert client.get(f"{summary}?route_target=local").status_code == 200


def test_a_read_while_the_store_is_down_is_a_503_in_the_error_shape(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", "read-side-admin")
    down = "postgresql://postgres@127.0.0.1:1/test?connect_timeout=1"  # nothing listens there
    with store_gateway(frontier_sim.base_url, down, tmp_path / "spool") as gw:
        resp = httpx.get(gw.base_url + "/admin/traffic/summary", headers=ADMIN, timeout=60)
        error = _error(resp, 503)
        assert error["code"] == "store_unavailable"
        # The gateway still serves; the answer is spooled until the store returns.
        body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(gw.base_url + "/v1/chat/completions", json=body).status_code == 200
