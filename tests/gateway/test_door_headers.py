"""What a door reads of a request's headers, in one pass (gateway.doors.skeleton.read_headers):
its own (route, tags, episode) and the wire format's that a pass-through carries on, the first
of a repeated one, as Starlette's ``Headers.get`` gives it."""

from __future__ import annotations

from starlette.requests import Request

from gateway.doors.exchange import Exchange
from gateway.doors.skeleton import (
    CARRIED_HEADERS,
    OWN_HEADERS,
    door_features,
    read_headers,
)


def _request(*headers: tuple[str, str]) -> Request:
    raw = [(k.encode(), v.encode("latin-1")) for k, v in headers]
    return Request({"type": "http", "method": "POST", "path": "/", "headers": raw})


def test_each_name_read_as_starlette_reads_it() -> None:
    request = _request(
        ("content-type", "application/json"),
        ("anthropic-beta", "a"),
        ("x-switchyard-route", "frontier"),
        ("anthropic-beta", "b"),  # repeated: the first one counts
        ("openai-beta", ""),  # empty: sent all the same
        ("x-switchyard-episode", "caf\xe9"),
    )
    for names in (OWN_HEADERS, CARRIED_HEADERS):
        read = read_headers(request, names)
        assert read == {n: v for n in names.values() if (v := request.headers.get(n)) is not None}
    assert read_headers(request, CARRIED_HEADERS) == {"anthropic-beta": "a", "openai-beta": ""}


def test_the_features_read_the_doors_own_headers() -> None:
    request = _request(
        ("x-switchyard-tags", "team=search, route=tagged,episode_id=from-tags"),
        ("x-switchyard-episode", "ep-7"),
    )
    ex = Exchange("0190a5a0-0000-7000-8000-000000000002", "chat.completions", "openai.chat", 0.0)
    body = {"model": "auto", "messages": [{"role": "user", "content": "hi"}]}
    f = door_features(
        "chat.completions", ex, request, body, stream=False, metadata={"a": "b"}, cache_key=None
    )
    assert f.tags == {"a": "b", "team": "search", "route": "tagged", "episode_id": "from-tags"}
    assert f.route_hint == "tagged"  # no route header: the tags' route
    assert f.episode_id is not None and f.request_id == ex.id and f.text is None
