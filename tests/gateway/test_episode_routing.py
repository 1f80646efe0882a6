"""Agent steps on a real gateway: tool-bearing requests are decided by the policy, and the turn
after a local step that broke (an invalid tool call, an error streak) goes to the frontier, the
record saying why, the client seeing no error. The local target is a served model on loopback
that answers with the tool call a test gives it; the frontier is the simulator."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from loadtests.bench.sim_gateway import simulator_backends
from router.chat_text import request_text
from router.learned import Outcome, fit
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.gateway.served_conversation.served import Answer, Call, ServedModel

REDIS_URL = "redis://127.0.0.1:6379/0"
READ_FILE: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
}
GOOD = Call("call_ok", "read_file", ('{"path": ', '"app.py"}'))
BROKEN = {
    "unknown_tool": Call("call_bad", "delete_repo", ("{}",)),
    "malformed_arguments": Call("call_bad", "read_file", ('{"path": "app.py"',)),
    "schema": Call("call_bad", "read_file", ('{"file": "app.py"}',)),
}


@pytest.fixture(scope="module")
def served() -> Iterator[ServedModel]:
    model = ServedModel().start()
    yield model
    model.stop()


def _config(sim_url: str, local_url: str, **overrides: Any) -> Any:
    backends = simulator_backends(sim_url)
    backends["local"] = {**backends["local"], "replicas": [local_url]}
    routing = {
        "default": "local",
        "aliases": {"auto": None, "switchyard-local": "local"},
        "fallbacks": {"local": ["frontier-openai"]},
        **overrides.pop("routing", {}),
    }
    return gateway_config(sim_url, backends=backends, routing=routing, **overrides)


@pytest.fixture(scope="module")
def gateway(frontier_sim: Any, served: ServedModel) -> Iterator[GatewayThread]:
    gw = GatewayThread(_config(frontier_sim.base_url, served.url)).start()
    yield gw
    gw.stop()


class Episode:
    """An agent client's conversation: it sends its whole history each turn and runs each call
    (answering every call with ``result``)."""

    def __init__(self, base_url: str, model: str = "auto", stream: bool = False) -> None:
        self.url = base_url + "/v1/chat/completions"
        self.id = f"ep-{uuid.uuid4().hex[:12]}"
        self.model = model
        self.stream = stream
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the failing test in app.py."},
        ]

    def turn(self, result: str = "def main(): ...") -> httpx.Response:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages,
            "tools": [READ_FILE],
        }
        headers = {"x-switchyard-episode": self.id}
        if self.stream:
            body["stream"] = True
        r = httpx.post(self.url, json=body, headers=headers, timeout=60)
        assert r.status_code == 200, r.text
        message = _streamed_message(r.text) if self.stream else r.json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:  # the agent answered in text: the user asks it to go on
            self.messages.append({"role": "assistant", "content": message.get("content") or "."})
            self.messages.append({"role": "user", "content": "Go on."})
            return r
        self.messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in calls:
            self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        return r


def _streamed_message(sse: str) -> dict[str, Any]:
    calls: dict[int, dict[str, Any]] = {}
    for line in sse.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        assert "error" not in event, event
        for choice in event.get("choices") or []:
            for delta in choice["delta"].get("tool_calls") or []:
                call = calls.setdefault(
                    delta["index"], {"type": "function", "function": {"arguments": ""}}
                )
                call["id"] = delta.get("id") or call.get("id")
                fn = delta.get("function") or {}
                if fn.get("name"):
                    call["function"]["name"] = fn["name"]
                call["function"]["arguments"] += fn.get("arguments") or ""
    return {"content": "streamed", "tool_calls": [calls[i] for i in sorted(calls)]}


def _route(r: httpx.Response) -> tuple[str, str]:
    return r.headers["x-switchyard-target"], r.headers["x-switchyard-route-reason"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
@pytest.mark.parametrize("problem", sorted(BROKEN))
def test_the_turn_after_a_broken_local_call_goes_to_the_frontier_and_the_record_says_why(
    gateway: GatewayThread, served: ServedModel, problem: str, stream: bool
) -> None:
    episode = Episode(gateway.base_url, stream=stream)
    served.answer = Answer(calls=(GOOD,))
    assert _route(episode.turn()) == ("local", "default")
    served.answer = Answer(calls=(BROKEN[problem],))
    assert _route(episode.turn(result="Error: the call failed")) == ("local", "default")
    r = episode.turn()
    target, reason = _route(r)
    assert target == "frontier-openai"
    assert reason.startswith("episode_fallback:invalid_tool_call ")
    fields = dict(part.split("=", 1) for part in reason.split()[1:])
    name = BROKEN[problem].name
    assert fields == {"failed_step": "1", "problem": f"{problem}:{name}", "turn": "1/3"}
    record = gateway.sink.wait_for(r.headers["x-request-id"])
    assert record.policy_reason == reason and record.route_target == "frontier-openai"
    assert record.status == 200 and record.episode_id == episode.id


def test_the_fallback_sticks_for_its_turns_then_the_policy_decides_again(
    gateway: GatewayThread, served: ServedModel
) -> None:
    episode = Episode(gateway.base_url)
    served.answer = Answer(calls=(BROKEN["unknown_tool"],))
    assert _route(episode.turn(result="Error: unknown tool"))[0] == "local"
    served.answer = Answer(calls=(GOOD,))
    turns = [_route(episode.turn()) for _ in range(4)]
    assert [t for t, _ in turns] == ["frontier-openai"] * 3 + ["local"]
    assert [reason.rsplit("turn=", 1)[-1] for _, reason in turns[:3]] == ["1/3", "2/3", "3/3"]
    assert turns[3][1] == "default"
    metrics = httpx.get(gateway.base_url + "/metrics").text
    assert 'switchyard_episode_fallback_decisions{kind="invalid_tool_call"}' in metrics
    assert 'switchyard_episode_failed_local_steps{kind="invalid_tool_call"}' in metrics


def test_an_error_streak_of_local_steps_sends_the_episode_to_the_frontier(
    gateway: GatewayThread, served: ServedModel
) -> None:
    episode = Episode(gateway.base_url)
    served.answer = Answer(calls=(GOOD,))
    routes = [_route(episode.turn(result="Error: no such file")) for _ in range(3)]
    assert [t for t, _ in routes] == ["local"] * 3  # streaks of 0, 1, 2 errors: under 3
    target, reason = _route(episode.turn())
    assert target == "frontier-openai"
    assert reason.startswith("episode_fallback:error_streak failed_step=2 problem=3_errors")


def test_valid_local_steps_and_other_episodes_stay_local(
    gateway: GatewayThread, served: ServedModel
) -> None:
    broken, healthy = Episode(gateway.base_url), Episode(gateway.base_url)
    served.answer = Answer(calls=(BROKEN["schema"],))
    broken.turn()
    served.answer = Answer(calls=(GOOD,))
    assert [_route(healthy.turn())[0] for _ in range(4)] == ["local"] * 4
    assert _route(broken.turn())[0] == "frontier-openai"


def test_a_client_that_pins_the_local_model_keeps_it(
    gateway: GatewayThread, served: ServedModel
) -> None:
    episode = Episode(gateway.base_url, model="switchyard-local")
    served.answer = Answer(calls=(BROKEN["unknown_tool"],))
    episode.turn()
    served.answer = Answer(calls=(GOOD,))
    assert _route(episode.turn()) == ("local", "alias:switchyard-local")


def test_the_messages_door_falls_back_on_claude_codes_session(
    gateway: GatewayThread, served: ServedModel
) -> None:
    """A Claude-Code-shaped client: the session in ``metadata.user_id``, tool results as
    ``tool_result`` blocks with ``is_error``; the broken call reaches it as a ``tool_use``."""
    session = json.dumps({"device_id": "d", "account_uuid": "", "session_id": str(uuid.uuid4())})
    tools = [{"name": "read_file", "input_schema": READ_FILE["function"]["parameters"]}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]

    def turn() -> httpx.Response:
        body = {
            "model": "auto",
            "max_tokens": 256,
            "messages": messages,
            "tools": tools,
            "metadata": {"user_id": session},
        }
        r = httpx.post(gateway.base_url + "/v1/messages", json=body, timeout=60)
        assert r.status_code == 200, r.text
        blocks = r.json()["content"]
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": u["id"],
                        "content": "no",
                        "is_error": True,
                    }
                    for u in uses
                ],
            }
        )
        return r

    served.answer = Answer(calls=(BROKEN["schema"],))
    assert _route(turn())[0] == "local"
    served.answer = Answer(calls=(GOOD,))
    target, reason = _route(turn())
    assert target == "frontier-openai"
    assert reason.startswith("episode_fallback:invalid_tool_call failed_step=0 problem=schema:")


def test_the_responses_door_falls_back_on_codexs_conversation(
    gateway: GatewayThread, served: ServedModel
) -> None:
    """A Codex-shaped client: ``prompt_cache_key`` names the conversation, the whole history goes
    back as ``function_call`` / ``function_call_output`` items, streamed."""
    tools = [{"type": "function", **READ_FILE["function"]}]
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": "Fix it."}]
    key = str(uuid.uuid4())

    def turn() -> httpx.Response:
        body = {
            "model": "auto",
            "instructions": "You are a coding agent.",
            "input": items,
            "tools": tools,
            "store": False,
            "stream": True,
            "prompt_cache_key": key,
        }
        r = httpx.post(gateway.base_url + "/v1/responses", json=body, timeout=60)
        assert r.status_code == 200, r.text
        done = [
            json.loads(line[6:])
            for line in r.text.splitlines()
            if line.startswith("data: ") and '"response.completed"' in line
        ]
        for item in done[0]["response"]["output"]:
            if item["type"] == "function_call":
                items.append({k: item[k] for k in ("type", "call_id", "name", "arguments")})
                out = {"call_id": item["call_id"], "output": "Error: invalid arguments"}
                items.append({"type": "function_call_output", **out})
        return r

    served.answer = Answer(calls=(BROKEN["malformed_arguments"],))
    assert _route(turn())[0] == "local"
    served.answer = Answer(calls=(GOOD,))
    target, reason = _route(turn())
    assert target == "frontier-openai"
    assert reason.startswith("episode_fallback:invalid_tool_call failed_step=0 problem=malformed")


def test_a_tool_request_with_a_confident_scorer_goes_local(
    frontier_sim: Any, served: ServedModel, tmp_path: Any
) -> None:
    def ask(i: int, question: str) -> dict[str, Any]:
        return {
            "model": "auto",
            "messages": [{"role": "user", "content": f"{question} (file {i}.py)"}],
            "tools": [READ_FILE],
        }

    outcomes = []
    for i in range(60):
        for question, ok in (("Where is main defined?", True), ("Port this to Rust.", False)):
            text = request_text("chat.completions", ask(i, question))
            outcomes += [
                Outcome("*", "local", ok, text=text),
                Outcome("*", "frontier", True, text=text),
            ]
    state = tmp_path / "learned.json"
    state.write_text(json.dumps(fit(outcomes, "fit-agent").to_json()))
    learned = {
        "local_target": "local",
        "frontier_target": "frontier-openai",
        "min_samples": 5,
        "exploration_share": 0.0,
        "state_file": str(state),
    }
    routing = {"default": "frontier-openai", "learned": learned}
    gw = GatewayThread(_config(frontier_sim.base_url, served.url, routing=routing)).start()
    served.answer = Answer(calls=(GOOD,))
    try:
        url = gw.base_url + "/v1/chat/completions"
        headers = {"x-switchyard-episode": f"ep-{uuid.uuid4().hex}"}
        confident = httpx.post(url, json=ask(7, "Where is main defined?"), headers=headers)
        unsure = httpx.post(url, json=ask(7, "Port this to Rust."))
    finally:
        gw.stop()
    target, reason = _route(confident)
    assert target == "local" and reason.startswith("learned:local ")
    assert _route(unsure)[0] == "frontier-openai"


def test_an_agent_loop_runs_on_the_model_its_first_step_drew(
    frontier_sim: Any, served: ServedModel
) -> None:
    """Whole loops: exploration (half the requests here, no scorer fitted) starts only at a
    loop's first step, and a loop that started local stays local, whatever later draws say."""
    learned: dict[str, Any] = {"local_target": "local", "frontier_target": "frontier-openai"}
    # Half the agent steps explored before any evidence: tools explored while unproven, and a
    # quality budget (1 - 0.01) that the cap on unmeasured exploration never binds.
    learned |= {"exploration_share": 0.5, "explore_unproven_tools": True}
    learned |= {"quality_target": 0.01, "exploration_budget": 1.0}
    routing = {"default": "frontier-openai", "learned": learned}
    gw = GatewayThread(_config(frontier_sim.base_url, served.url, routing=routing)).start()
    served.answer = Answer(calls=(GOOD,))
    routes: list[list[tuple[str, str, bool]]] = []  # target, reason, went on a loop
    try:
        for _ in range(12):
            episode = Episode(gw.base_url)
            steps = []
            for _ in range(4):
                on_loop = episode.messages[-1]["role"] == "tool"
                steps.append((*_route(episode.turn()), on_loop))
            routes.append(steps)
    finally:
        gw.stop()
    started_local = [r for r in routes if r[0][0] == "local"]
    assert started_local and len(started_local) < len(routes)
    for steps in started_local:  # the local model's calls are valid: the loop never fails
        assert all(target == "local" for target, _, _ in steps), steps
    reasons = [reason.split(" ", 1)[0] for steps in routes for _, reason, _ in steps[1:]]
    assert "episode_loop:local" in reasons
    for steps in routes:  # a loop the frontier ran is never explored half-way (the
        # simulator answers in text, so its next step is a new user turn: drawn afresh)
        for (before, _, _), (target, _, on_loop) in itertools.pairwise(steps):
            assert not on_loop or target == before, steps


def _redis_or_skip() -> None:
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except (redis.RedisError, OSError) as exc:
        pytest.skip(f"Redis not reachable at {REDIS_URL}: {exc}")


def test_the_fallback_is_seen_by_every_gateway_of_a_fleet(
    frontier_sim: Any, served: ServedModel
) -> None:
    _redis_or_skip()
    name = f"test-episodes-{uuid.uuid4().hex[:8]}"
    fleet = {"backend": "redis", "redis_url": REDIS_URL, "name": name}
    gateways = [
        GatewayThread(_config(frontier_sim.base_url, served.url, fleet=fleet)).start()
        for _ in range(2)
    ]
    try:
        first = Episode(gateways[0].base_url)
        second = Episode(gateways[1].base_url)
        second.id, second.messages = first.id, first.messages  # one client, two gateways
        served.answer = Answer(calls=(BROKEN["unknown_tool"],))
        assert _route(first.turn())[0] == "local"
        served.answer = Answer(calls=(GOOD,))
        target, reason = _route(second.turn())
        assert target == "frontier-openai"
        assert reason.startswith("episode_fallback:invalid_tool_call failed_step=0 ")
        assert _route(first.turn())[1].endswith("turn=2/3")  # back on the first gateway
    finally:
        for gw in gateways:
            gw.stop()
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{name}:*"))
        if keys:
            client.delete(*keys)
