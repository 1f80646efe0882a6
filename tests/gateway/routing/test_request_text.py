"""The request's text (``features.text``) is built only where the routing reads it
(:meth:`gateway.routing.decider.Decider.reads_text`): a learned policy's ``auto`` request, a
canary's, an agent episode's step; never for the rules alone or an explicit model."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from starlette.requests import Request

from gateway.config import LimitsConfig, SwitchyardConfig
from gateway.doors.exchange import Exchange
from gateway.doors.openai.handlers import CHAT_DOOR, _chat
from gateway.doors.skeleton import EPISODE_HEADER, _prepare
from gateway.routing.decider import Decider
from gateway.routing.table import Canary, Routing, RoutingView, build_policy
from router.chat_text import request_text
from router.features import RequestFeatures
from tests.fixtures.gateway_fixture import gateway_config

LEARNED = {
    "default": "frontier-openai",
    "aliases": {"auto": None, "gpt-4o-mini": "frontier-openai"},
    "learned": {"local_target": "local", "frontier_target": "frontier-openai"},
}
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]


def _config(**overrides: Any) -> SwitchyardConfig:
    return gateway_config("http://127.0.0.1:9", **overrides)


def _routing(config: SwitchyardConfig) -> Routing:
    return Routing(build_policy(config, config.routing, None), {}, config)


def _ask(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def _prepared(view: RoutingView, body: dict[str, Any], episode: str | None = None) -> Exchange:
    """The exchange as the OpenAI chat door leaves it, before the decision."""
    headers = [(b"content-type", b"application/json")]
    if episode is not None:
        headers.append((EPISODE_HEADER.encode(), episode.encode()))
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    ex = Exchange("0190a5a0-0000-7000-8000-000000000001", CHAT_DOOR.endpoint, "openai.chat", 0.0)
    _prepare(
        ex, orjson.dumps(body), _chat, Request(scope), LimitsConfig(), Decider(view.routing), view
    )
    assert ex.features is not None and ex.features.request_id == ex.id
    return ex


def _features(ex: Exchange) -> RequestFeatures:
    assert ex.features is not None
    return ex.features


def test_the_rules_alone_never_read_the_text() -> None:
    view = RoutingView(_routing(_config()))
    for model in ("auto", "gpt-4o-mini", "frontier-openai"):
        assert _features(_prepared(view, _ask(model))).text is None


def test_a_learned_policy_gets_the_text_of_auto_requests_only() -> None:
    routing = _routing(_config(routing=LEARNED))
    view = RoutingView(routing)
    body = _ask("auto")
    assert _features(_prepared(view, body)).text == request_text("chat.completions", body)
    for model in ("gpt-4o-mini", "frontier-openai"):  # a pinned alias, a target's own name
        features = _features(_prepared(view, _ask(model)))
        assert features.text is None
        with_text = dataclasses.replace(features, text=request_text("chat.completions", body))
        assert routing.policy.decide(features) == routing.policy.decide(with_text)


def test_a_learned_canary_gets_the_text_of_auto_requests() -> None:
    live = _routing(_config())
    candidate = _config(routing=LEARNED).routing
    policy = build_policy(live.config, candidate, None)
    view = RoutingView(live, Canary(policy, 0.1, candidate))
    assert _features(_prepared(view, _ask("auto"))).text is not None
    assert _features(_prepared(view, _ask("gpt-4o-mini"))).text is None


def test_an_agent_step_of_a_named_episode_gets_the_text_while_fallback_is_on() -> None:
    body = _ask("gpt-4o-mini", tools=TOOLS)
    on = RoutingView(_routing(_config()))
    assert _features(_prepared(on, body, episode="ep-1")).text is not None
    assert _features(_prepared(on, body)).text is None  # no episode named
    assert _features(_prepared(on, _ask("gpt-4o-mini"), episode="ep-1")).text is None  # no tools
    routing = {**_config().routing.model_dump(), "episodes": {"fallback": False}}
    off = RoutingView(_routing(_config(routing=routing)))
    assert _features(_prepared(off, body, episode="ep-1")).text is None
