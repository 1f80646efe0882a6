"""Every error in OpenAI's shape, with the right status."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fixtures.gateway_fixture import GatewayThread, gateway_config


def _post(gw: GatewayThread, body: object, **kw: object) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", json=body, timeout=30, **kw)  # type: ignore[arg-type]


def _assert_openai_error(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    err = resp.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert resp.headers["x-request-id"]
    return err  # type: ignore[no-any-return]


def test_malformed_json_is_400(gateway: GatewayThread) -> None:
    resp = httpx.post(gateway.base_url + "/v1/chat/completions", content=b"{nope")
    err = _assert_openai_error(resp, 400)
    assert err["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "auto", "messages": []}, "messages"),
        ({"model": "auto", "messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
        (
            {"model": "auto", "messages": [{"role": "user", "content": "x"}], "temperature": 3},
            "temperature",
        ),
        ({"model": "auto", "messages": [{"role": "user", "content": "x"}], "n": 0}, "n"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        (
            {
                "model": "auto",
                "messages": [{"role": "user", "content": "x"}],
                "stream_options": {"include_usage": True},
            },
            "stream_options",
        ),
    ],
)
def test_invalid_fields_are_400_naming_the_field(
    gateway: GatewayThread, body: dict[str, object], param: str
) -> None:
    err = _assert_openai_error(_post(gateway, body), 400)
    assert err["param"] == param


def test_unknown_model_is_404(gateway: GatewayThread) -> None:
    err = _assert_openai_error(
        _post(gateway, {"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}), 404
    )
    assert err["code"] == "model_not_found"


def test_unknown_path_is_404_in_openai_shape(gateway: GatewayThread) -> None:
    resp = httpx.get(gateway.base_url + "/v1/nothing-here")
    assert resp.status_code == 404
    assert resp.json()["error"]["type"] == "not_found_error"


def test_refused_requests_are_recorded_too(gateway: GatewayThread) -> None:
    resp = httpx.post(gateway.base_url + "/v1/chat/completions", content=b"{nope")
    record = gateway.sink.wait_for(resp.headers["x-request-id"])
    assert record.status == 400
    assert record.request == {"_unparsed": "{nope"}


@pytest.fixture(scope="module")
def edge_gateway(frontier_sim):  # type: ignore[no-untyped-def]
    """Targets that fail in each way an upstream can fail."""
    sim = frontier_sim.base_url
    cfg = gateway_config(
        sim,
        gateway={"limits": {"max_body_bytes": 4096}, "breaker": {"failure_threshold": 100}},
        backends={
            "ratelimited": {"kind": "vllm", "model": "sim-ratelimit", "replicas": [sim]},
            "broken": {"kind": "vllm", "model": "sim-error", "replicas": [sim]},
            "slow": {
                "kind": "vllm",
                "model": "sim-slow",
                "replicas": [sim],
                "first_byte_timeout_s": 0.3,
                "timeout_s": 0.5,
            },
            "dead": {"kind": "vllm", "model": "x", "replicas": ["http://127.0.0.1:9"]},
            "frontier-broken": {
                "kind": "litellm",
                "model": "openai/sim-error",
                "api_base": sim + "/v1",
            },
            "frontier-ok": {
                "kind": "litellm",
                "model": "openai/gpt-4o-mini",
                "api_base": sim + "/v1",
            },
        },
        routing={
            "default": "frontier-ok",
            "aliases": {
                "ratelimited": "ratelimited",
                "broken": "broken",
                "slow": "slow",
                "dead": "dead",
                "frontier-broken": "frontier-broken",
                "both-broken": "broken",
            },
            "fallbacks": {"broken": ["frontier-broken"]},
        },
    )
    gw = GatewayThread(cfg).start()
    yield gw
    gw.stop()


def _chat(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "x"}]}


def test_body_too_large_is_413(edge_gateway: GatewayThread) -> None:
    body = {"model": "auto", "messages": [{"role": "user", "content": "x" * 10_000}]}
    err = _assert_openai_error(_post(edge_gateway, body), 413)
    assert err["code"] == "request_too_large"


def test_upstream_rate_limit_is_429_with_retry_after(edge_gateway: GatewayThread) -> None:
    resp = _post(edge_gateway, _chat("ratelimited"))
    _assert_openai_error(resp, 429)
    assert resp.headers["retry-after"] == "1"


def test_upstream_failure_is_502(edge_gateway: GatewayThread) -> None:
    _assert_openai_error(_post(edge_gateway, _chat("frontier-broken")), 502)


def test_dead_replica_is_503(edge_gateway: GatewayThread) -> None:
    _assert_openai_error(_post(edge_gateway, _chat("dead")), 503)


def test_upstream_timeout_is_504(edge_gateway: GatewayThread) -> None:
    _assert_openai_error(_post(edge_gateway, _chat("slow")), 504)


def test_all_backends_failed_lists_every_attempt(edge_gateway: GatewayThread) -> None:
    resp = _post(edge_gateway, _chat("both-broken"))
    err = _assert_openai_error(resp, 502)
    assert "broken" in str(err["message"]) and "frontier-broken" in str(err["message"])
    record = edge_gateway.sink.wait_for(resp.headers["x-request-id"])
    assert [a["target"] for a in record.attempts] == ["broken", "frontier-broken"]


def test_sdk_raises_typed_errors(edge_gateway: GatewayThread) -> None:
    client = openai.OpenAI(base_url=edge_gateway.base_url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="ratelimited", messages=[{"role": "user", "content": "x"}]
        )
