"""The admin API on FastAPI, from outside: its OpenAPI document at ``/admin/openapi.json`` is a
valid OpenAPI 3.1 document naming every admin route (and no other) with its request and answer
models; the document and the Swagger page at ``/admin/docs`` are behind the admin token and its
wrong-token throttle; a malformed admin request is a 400 in the gateway's error shape (never
FastAPI's 422), and the token is checked before a body is read. FastAPI's own ``/openapi.json``
and ``/docs`` are off.

One gateway with a SQLite store for the module; each throttle test speaks from an address of its
own (``X-Forwarded-For`` from loopback, which uvicorn trusts), so no other test is throttled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from openapi_spec_validator import validate
from starlette.routing import Route

from gateway.admin.models import TrafficExportManifest, TrafficSummaryQuery
from gateway.admin.router import ADMIN_BODY_LIMIT
from gateway.auth.login_throttle import THROTTLED_CODE
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway
from traffic.store import InferenceFilter

TOKEN = "openapi-admin"
ADMIN = {"authorization": f"Bearer {TOKEN}"}
WRONG = {"authorization": "Bearer not-the-token"}
# The admin routes that take a JSON body, each with the model the document names for it.
BODIES = {
    ("post", "/admin/keys"): "KeyCreate",
    ("post", "/admin/canary"): "CanaryRequest",
    ("post", "/admin/canary/resume"): "CanaryResume",
    ("post", "/admin/traffic/export"): "ExportRequest",
    ("post", "/admin/replicas/drain"): "ReplicaCommand",
    ("post", "/admin/replicas/undrain"): "ReplicaCommand",
    ("post", "/admin/episodes/export"): "EpisodeExportRequest",
    ("post", "/admin/forget"): "ForgetRequest",
    ("patch", "/admin/keys/{key_id}"): "KeyConsent",
    ("put", "/admin/teams/{team_id}"): "TeamConsent",
}


@pytest.fixture(scope="module")
def gw(frontier_sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayThread]:
    tmp = tmp_path_factory.mktemp("openapi")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWITCHYARD_ADMIN_TOKEN", TOKEN)
        store = f"sqlite:///{tmp / 'traffic.db'}"
        with store_gateway(frontier_sim.base_url, store, tmp / "spool") as running:
            yield running


@pytest.fixture(scope="module")
def spec(gw: GatewayThread) -> dict[str, Any]:
    answer = httpx.get(gw.base_url + "/admin/openapi.json", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/json"
    document: dict[str, Any] = answer.json()
    return document


def _error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            yield method, path, operation


def _ref(schema: dict[str, Any]) -> str:
    ref: str = schema["$ref"]
    return ref.removeprefix("#/components/schemas/")


def test_the_schema_is_a_valid_openapi_3_1_document(spec: dict[str, Any]) -> None:
    assert spec["openapi"].startswith("3.1")
    validate(spec)  # raises on the first violation


def test_the_schema_names_every_admin_route_and_no_other(
    gw: GatewayThread, spec: dict[str, Any]
) -> None:
    admin = [r for r in gw.app.routes if isinstance(r, Route) and r.path.startswith("/admin")]
    assert admin and all(isinstance(r, APIRoute) for r in admin)  # every admin route is typed
    served = {
        (method.lower(), r.path)
        for r in admin
        if isinstance(r, APIRoute) and r.include_in_schema
        for method in r.methods
    }
    assert {(method, path) for method, path, _ in _operations(spec)} == served
    assert {r.path for r in admin if not r.include_in_schema} == {
        "/admin/openapi.json",
        "/admin/docs",
    }
    doors = [r for r in gw.app.routes if isinstance(r, Route) and not r.path.startswith("/admin")]
    assert doors and not any(isinstance(r, APIRoute) for r in doors)  # the doors stay Starlette's
    assert any(r.path == "/v1/chat/completions" for r in doors)


def test_every_operation_carries_its_models_and_the_error_shape(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    for method, path, operation in _operations(spec):
        success = [code for code in operation["responses"] if code.startswith("2")]
        assert len(success) == 1, (method, path)
        answer = operation["responses"][success[0]]["content"]["application/json"]["schema"]
        assert answer.get("$ref") or answer.get("type") == "object", (method, path, answer)
        if "$ref" in answer:
            assert _ref(answer) in schemas
        refusal = operation["responses"]["4XX"]["content"]["application/json"]["schema"]
        assert _ref(refusal) == "ErrorBody"
        assert "422" not in operation["responses"], (method, path)  # never answered
        body = operation.get("requestBody")
        if (method, path) in BODIES:
            assert body is not None, (method, path)
            model = _ref(body["content"]["application/json"]["schema"])
            assert model == BODIES[(method, path)] and model in schemas
        else:
            assert body is None, (method, path)
    assert "HTTPValidationError" not in schemas
    assert spec["security"] == [{"adminToken": []}]
    assert spec["components"]["securitySchemes"]["adminToken"]["scheme"] == "bearer"


def test_the_answer_models_name_the_fields_clients_read(spec: dict[str, Any]) -> None:
    schemas = spec["components"]["schemas"]
    summary = next(op for m, p, op in _operations(spec) if p == "/admin/traffic/summary")
    params = {p["name"] for p in summary["parameters"]}
    assert {"by", "tag", "since", "route_target", "ok_only"} <= params
    assert set(schemas["CreatedKey"]["properties"]) >= {"id", "name", "prefix", "key"}
    assert set(schemas["FleetStatus"]["properties"]) >= {"member", "revision", "replicas"}
    backends = next(op for m, p, op in _operations(spec) if p == "/admin/backends")
    ok = backends["responses"]["200"]["content"]["application/json"]["schema"]
    assert _ref(ok["additionalProperties"]) == "BackendState"


@pytest.mark.parametrize("path", ["/admin/openapi.json", "/admin/docs"])
def test_the_schema_and_its_page_need_the_admin_token(
    gw: GatewayThread, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each from an address of its own: two wrong tokens must not throttle another test.
    where = {"x-forwarded-for": f"198.51.100.{len(path)}"}
    assert _error(httpx.get(gw.base_url + path, headers=where), 401)["type"] == (
        "authentication_error"
    )
    _error(httpx.get(gw.base_url + path, headers={**where, **WRONG}), 401)
    right = httpx.get(gw.base_url + path, headers={**where, **ADMIN})
    assert right.status_code == 200
    if path == "/admin/docs":
        assert "swagger-ui" in right.text and "/admin/openapi.json" in right.text
    monkeypatch.delenv("SWITCHYARD_ADMIN_TOKEN")
    off = _error(httpx.get(gw.base_url + path, headers={**where, **ADMIN}), 403)
    assert off["code"] == "admin_disabled"


@pytest.mark.parametrize("path", ["/openapi.json", "/docs", "/redoc", "/docs/oauth2-redirect"])
def test_fastapis_own_schema_and_pages_are_off(gw: GatewayThread, path: str) -> None:
    _error(httpx.get(gw.base_url + path, headers=ADMIN), 404)


def test_a_malformed_admin_request_is_a_400_in_the_gateway_shape(gw: GatewayThread) -> None:
    client = httpx.Client(base_url=gw.base_url, headers=ADMIN, timeout=30)
    not_json = _error(client.post("/admin/keys", content=b'{"name": '), 400)
    assert not_json["type"] == "invalid_request_error" and not_json["code"] == "invalid_json"
    wrong_type = _error(client.post("/admin/keys", json={"name": 5}), 400)
    assert wrong_type["param"] == "name" and "name" in wrong_type["message"]
    unknown = {"name": "x", "nom": "x"}
    assert _error(client.post("/admin/keys", json=unknown), 400)["param"] == "nom"
    assert _error(client.post("/admin/keys", json=[]), 400)["type"] == "invalid_request_error"
    _error(client.post("/admin/keys"), 400)  # no body at all
    share = _error(client.post("/admin/canary", json={"routing": {}, "share": 2}), 400)
    assert "share" in share["message"]
    cmd = {"target": "local", "replica": "http://x", "timeout_s": -1}
    assert _error(client.post("/admin/replicas/drain", json=cmd), 400)["param"] == "timeout_s"
    query = _error(client.get("/admin/traffic/summary?nonsense=1"), 400)
    assert query["param"] == "nonsense"
    assert _error(client.get("/admin/traffic/summary?ok_only=perhaps"), 400)["param"] == "ok_only"
    # a JSON body without a Content-Type is read as JSON, as the admin API always did
    created = client.post("/admin/keys", content=b'{"name": "typeless"}')
    assert created.status_code == 201 and created.json()["name"] == "typeless"


def test_the_token_is_checked_before_a_body_is_read(gw: GatewayThread) -> None:
    where = {"x-forwarded-for": "198.51.100.60"}
    url = gw.base_url + "/admin/keys"
    assert httpx.post(url, content=b"{nope", headers=where).status_code == 401
    big = b'{"name": "' + b"x" * ADMIN_BODY_LIMIT + b'"}'
    assert httpx.post(url, content=big, headers=where).status_code == 401
    too_large = _error(httpx.post(url, content=big, headers=ADMIN), 413)
    assert too_large["code"] == "request_too_large"


def test_the_throttle_applies_to_the_schema(gw: GatewayThread) -> None:
    where = {"x-forwarded-for": "198.51.100.70"}
    url = gw.base_url + "/admin/openapi.json"
    for i in range(5):
        guess = {**where, "authorization": f"Bearer guess-{i}"}
        assert httpx.get(url, headers=guess).status_code == 401, i
    refused = httpx.get(url, headers={**where, **ADMIN})  # the right token, too late
    error = _error(refused, 429)
    assert error["type"] == "rate_limit_error" and error["code"] == THROTTLED_CODE
    assert 1 <= int(refused.headers["retry-after"]) <= 12
    page = httpx.get(gw.base_url + "/admin/docs", headers={**where, **ADMIN})
    assert page.status_code == 429
    elsewhere = {"x-forwarded-for": "198.51.100.71", **ADMIN}
    assert httpx.get(url, headers=elsewhere).status_code == 200


def test_the_summary_query_names_every_field_of_the_traffic_filter() -> None:
    """One definition of the filter: the summary's query string has each of its fields (tags
    as repeated ``tag=key=value``), plus the group-by columns."""
    filter_fields = {f.name for f in dataclasses.fields(InferenceFilter)}
    query_fields = set(TrafficSummaryQuery.model_fields)
    assert query_fields == (filter_fields - {"tags"}) | {"tag", "by"}


def test_the_export_manifest_model_names_every_field_of_the_written_manifest() -> None:
    """The admin API's manifest model restates ``traffic.export.ExportManifest`` (whose module
    the gateway must not import at start-up): the two name the same fields."""
    from traffic.export.export import ExportManifest

    assert set(TrafficExportManifest.model_fields) == set(ExportManifest.model_fields)
