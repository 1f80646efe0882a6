"""The learned scorer on the request path: odd requests are scored or defaulted, never a 500, at
every door, and each decision's reason names the score, the threshold and the scorer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from router.chat_text import request_text
from router.learned import Outcome, fit
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config


def _ask(question: str, i: int) -> dict[str, Any]:
    content = f"```python\ndef f{i}(x):\n    return x\n```\n{question}"
    return {"model": "auto", "messages": [{"role": "user", "content": content}]}


@pytest.fixture(scope="module")
def learned_gateway(
    frontier_sim: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayThread]:
    work = tmp_path_factory.mktemp("learned")
    outcomes = []
    # enough verdicts that the threshold's lower bound clears the target (router/calibration.py)
    for i in range(200):
        for question, ok in (("What type does f return?", True), ("Write tests for f.", False)):
            text = request_text("chat.completions", _ask(question, i))
            outcomes += [
                Outcome("*", "local", ok, text=text),
                Outcome("*", "frontier", True, text=text),
            ]
    state = work / "learned.json"
    state.write_text(json.dumps(fit(outcomes, "fit-odd").to_json()))
    learned = {
        "local_target": "local",
        "frontier_target": "frontier-openai",
        "min_samples": 5,
        "state_file": str(state),
    }
    routing = {"default": "frontier-openai", "aliases": {"auto": None}, "learned": learned}
    gw = GatewayThread(gateway_config(frontier_sim.base_url, routing=routing)).start()
    yield gw
    gw.stop()


ODD: list[tuple[str, dict[str, Any]]] = [
    (
        "/v1/chat/completions",
        {"model": "auto", "messages": [{"role": "system", "content": "only a system turn"}]},
    ),
    (
        "/v1/chat/completions",
        {
            "model": "auto",
            "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        },
    ),
    (
        "/v1/chat/completions",
        {"model": "auto", "messages": [{"role": "user", "content": "x" * 3_000_000}]},
    ),
    (
        "/v1/chat/completions",
        {
            "model": "auto",
            "messages": [{"role": "user", "content": "use the tools"}],
            "tools": [
                {"type": "function", "function": {"name": f"never_seen_{i}"}} for i in range(300)
            ],
        },
    ),
    ("/v1/completions", {"model": "auto", "prompt": [1, 2, 3]}),
    ("/v1/responses", {"model": "auto", "instructions": "no input at all"}),
    (
        "/v1/messages",
        {
            "model": "auto",
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "url", "url": "http://127.0.0.1/x.png"},
                        }
                    ],
                }
            ],
        },
    ),
]


@pytest.mark.parametrize(("path", "body"), ODD, ids=[f"{p}-{i}" for i, (p, _) in enumerate(ODD)])
def test_odd_requests_are_scored_or_defaulted_never_a_server_error(
    learned_gateway: GatewayThread, path: str, body: dict[str, Any]
) -> None:
    r = httpx.post(learned_gateway.base_url + path, json=body, timeout=60)
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        reason = r.headers["x-switchyard-route-reason"]
        assert reason.startswith("learned:") and "scorer=fit-odd" in reason


def test_the_reason_names_score_threshold_and_scorer(learned_gateway: GatewayThread) -> None:
    r = httpx.post(
        learned_gateway.base_url + "/v1/chat/completions", json=_ask("What type does f return?", 7)
    )
    reason = r.headers["x-switchyard-route-reason"]
    assert r.headers["x-switchyard-target"] == "local"
    fields = dict(part.split("=", 1) for part in reason.split()[1:])
    assert float(fields["p_local"]) >= float(fields["threshold"])
    assert fields["scorer"] == "fit-odd"
    record = learned_gateway.sink.wait_for(r.headers["x-request-id"])
    assert record.policy_reason == reason


@pytest.mark.parametrize("stream", [False, True])
def test_every_learned_decision_is_recorded_with_its_typed_fields(
    learned_gateway: GatewayThread, stream: bool
) -> None:
    """The record carries the decision as columns (propensity, score, threshold, the state's
    version, the target as decided), not only as the reason's rounded words."""
    url = learned_gateway.base_url + "/v1/chat/completions"
    seen = set()
    for i, question in enumerate(["What type does f return?", "Write tests for f."] * 3):
        r = httpx.post(url, json={**_ask(question, 100 + i), "stream": stream}, timeout=60)
        assert r.status_code == 200, r.text
        record = learned_gateway.sink.wait_for(r.headers["x-request-id"])
        assert record.decision_kind in (
            "learned_local",
            "learned_explore",
            "learned_frontier",
            "learned_check",
        )
        assert record.decision_state_version == "fit-odd"
        assert record.decision_p_local is not None and record.decision_threshold is not None
        assert f"p_local={record.decision_p_local:.3f}" in (record.policy_reason or "")
        assert record.decision_target == record.route_target == r.headers["x-switchyard-target"]
        local = record.decision_p_local >= record.decision_threshold
        if local:  # 1 - frontier_check_share
            assert record.decision_propensity == pytest.approx(0.98)
        else:  # the exploration share, at most the configured 5% (capped by measured harm)
            assert record.decision_propensity is not None
            assert 0 <= record.decision_propensity <= 0.05
        assert record.release_id is None and record.release_arm is None  # no canary running
        seen.add(record.decision_kind)
    assert "learned_local" in seen and len(seen) >= 2
