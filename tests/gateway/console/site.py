"""A console to test: a real gateway on loopback over a seeded SQLite store.

The store holds a day of synthetic traffic (:mod:`gateway.console.synthetic`), API keys and
model versions; the learned routing policy is fitted on that traffic's verdicts; a flywheel run
is written by the RL loop's own report writer over the same record; then real requests go
through the gateway to the frontier simulator, with feedback, so the newest exchanges are live
ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from gateway.console.synthetic import api_keys, generate, model_versions
from loadtests.bench.sim_gateway import simulator_aliases
from rl_loop.report import check_targets, round_figures, window_figures, write_report
from router.chat_text import request_text
from router.learned import Arm, Outcome, fit
from serving.names import ADMIN_TOKEN_ENV
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway
from traffic.store import ModelVersionRecord, StoreConfig, open_store

ADMIN_TOKEN = "console-test-admin-token"
OPERATOR = "ann"
LEARNABLE = ["complete", "docstring", "explain"]
SYNTHETIC_ROWS = 1500
CANDIDATE_VERSION = "ft-r4-candidate"


@dataclass(frozen=True)
class Site:
    gw: GatewayThread
    store_url: str
    flywheel_dir: Path
    candidate_dir: Path

    @property
    def url(self) -> str:
        return self.gw.base_url


@contextmanager
def admin_token() -> Iterator[str]:
    previous = os.environ.get(ADMIN_TOKEN_ENV)
    os.environ[ADMIN_TOKEN_ENV] = ADMIN_TOKEN
    try:
        yield ADMIN_TOKEN
    finally:
        if previous is None:
            os.environ.pop(ADMIN_TOKEN_ENV, None)
        else:
            os.environ[ADMIN_TOKEN_ENV] = previous


async def _seed(url: str, root: Path, now: datetime) -> tuple[Path, Path]:
    """Synthetic traffic, keys and versions; a fitted learned state; a flywheel run."""
    store = open_store(StoreConfig(url=url))
    await store.connect()
    try:
        for key in api_keys(now):
            await store.create_api_key(key)
        for version in model_versions(now, timedelta(hours=24)):
            await store.upsert_model_version(version)
        candidate_dir = root / "checkpoints" / CANDIDATE_VERSION
        candidate_dir.mkdir(parents=True)
        await store.upsert_model_version(
            ModelVersionRecord(id=CANDIDATE_VERSION, parent="ft-r3", path=str(candidate_dir))
        )
        outcomes = []
        for batch in generate(SYNTHETIC_ROWS, until=now, span=timedelta(hours=24), seed=7):
            await store.insert_inferences(batch.inferences)
            await store.insert_feedback(batch.feedback)
            verdicts = {f.inference_id: f.kind == "accepted" for f in batch.feedback}
            for inf in batch.inferences:
                if inf.id in verdicts and inf.route_target in ("local", "frontier-openai"):
                    arm: Arm = "local" if inf.route_target == "local" else "frontier"
                    assert isinstance(inf.request, dict)  # built here, not by the writer process
                    text = request_text(inf.endpoint, inf.request)
                    outcomes.append(Outcome("*", arm, verdicts[inf.id], text=text))
        state_file = root / "learned.json"
        state_file.write_text(json.dumps(fit(outcomes, "fit-test").to_json()))
        run_dir = root / "flywheel" / "run-20260301T090000"
        figures = []
        for k in range(4):
            since = now - timedelta(hours=24) + timedelta(hours=6 * k)
            window = await window_figures(store, since, since + timedelta(hours=6))
            figures.append(round_figures(k, f"ft-r{k}", f"v1+fit-r{k}", window, LEARNABLE, 0))
            _write_round(run_dir / f"round-{k}", k)
        run_dir.mkdir(parents=True, exist_ok=True)
        targets = check_targets(figures, LEARNABLE, 0.05, 0)
        header = {"preset": "test", "run_dir": str(run_dir)}
        await asyncio.to_thread(
            write_report, header, figures, [{"promoted": True}] * 4, targets, [run_dir], 3600.0
        )
    finally:
        await store.close()
    return state_file, candidate_dir


def _write_round(path: Path, k: int) -> None:
    """``round.json`` and ``gate.txt`` as ``rl_loop.loop`` writes them."""
    path.mkdir(parents=True)
    passed = k != 2
    data: dict[str, Any] = {
        "round": k,
        "served_before": f"ft-r{k - 1}" if k else "base-0",
        "candidate": f"ft-r{k}",
        "promoted": passed,
        "served_after": f"ft-r{k}" if passed else f"ft-r{k - 1}",
        "data": {"sft_train": 120 + k, "prompts_train": 80},
        "rl": {"steps": 8, "first_loss": 0.9, "last_loss": 0.6},
        "sft": {"steps": 30, "first_loss": 1.4, "last_loss": 0.8},
        "gate": {
            "passed": passed,
            "reasons": [] if passed else ["refactor: accept 0.41 < 0.45"],
            "current": {"accept": 0.6},
            "candidate": {"accept": 0.62 if passed else 0.55},
        },
        "swap": {"ok": passed, "rolled_back": False, "replicas": []},
        "refit": {"version": f"fit-r{k}"},
        "seconds": {"datasets": 3.0, "rl": 40.0, "sft": 25.0, "swap": 6.0},
    }
    (path / "round.json").write_text(json.dumps(data, indent=2))
    (path / "gate.txt").write_text(f"gate round {k}: {'passed' if passed else 'failed'}\n")


def _traffic(base_url: str) -> None:
    """Live requests through the gateway, two of them in one episode, most with feedback."""
    for i in range(24):
        family = ("complete", "explain", "refactor")[i % 3]
        body = {
            "model": "auto" if i % 4 else "gpt-4o-mini",
            "messages": [{"role": "user", "content": f"{family} the function live_{i}"}],
        }
        headers = {"x-switchyard-tags": f"family={family}"}
        if i < 2:
            headers["x-switchyard-episode"] = "ep-live-session"
        answer = httpx.post(base_url + "/v1/chat/completions", json=body, headers=headers)
        answer.raise_for_status()
        if i % 3:
            kind = "accepted" if i % 3 == 1 else "rejected"
            feedback = {"inference_id": answer.headers["x-request-id"], "kind": kind}
            httpx.post(base_url + "/v1/feedback", json=feedback).raise_for_status()


def start_site(sim_url: str, root: Path) -> Site:
    url = f"sqlite:///{root / 'traffic.db'}"
    state_file, candidate_dir = asyncio.run(_seed(url, root, datetime.now(UTC)))
    learned = {
        "local_target": "local",
        "frontier_target": "frontier-openai",
        "state_file": str(state_file),
    }
    routing = {
        "default": "local",
        "aliases": simulator_aliases(),
        "rules": [
            {
                "name": "tagged-frontier",
                "match": {"route_hint": ["frontier"]},
                "target": "frontier-openai",
            }
        ],
        "fallbacks": {"local": ["frontier-openai"]},
        "learned": learned,
    }
    gw = store_gateway(
        sim_url,
        url,
        root / "spool",
        routing=routing,
        console={"flywheel_dir": str(root / "flywheel")},
    ).start()
    _traffic(gw.base_url)
    wait_recorded(gw)
    return Site(gw, url, root / "flywheel", candidate_dir)


def wait_recorded(gw: GatewayThread, timeout_s: float = 10.0) -> None:
    """Until the gateway's writer has stored all it was given."""
    writer = gw.app.state.recorder.writer
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = writer.stats()
        if stats.written_total >= stats.queued_total and stats.queue_depth == 0:
            return
        time.sleep(0.02)
    raise AssertionError(f"the writer did not catch up: {writer.stats()}")
