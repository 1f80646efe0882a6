"""The Grafana dashboard's queries against what a real gateway exports.

The gateway runs the compose deployment's own config (deploy/compose/gateway.yaml) with the
environment the image's entrypoint gives it, its providers on the frontier simulator, Redis on
loopback and a SQLite store; only what cannot exist here is changed (the replica URL points at
a closed port, so local requests fail over as the config says; the fleet and rate-limit keys get
a private Redis namespace; auth is off so no key has to be minted). Traffic is sent through it,
then `/metrics` is scraped and every query of the dashboard is parsed as PromQL.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import parse_config
from serving.names import LOCAL_MODEL_NAME
from tests.deploy.deploy_files import DEPLOY, entrypoint_environment, load_yaml
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.fleet.harness import drop_redis_keys

pytestmark = pytest.mark.redis

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "switchyard.json"
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yaml"
# What Grafana puts in place of its own variables before a query reaches Prometheus.
GRAFANA_INTERVALS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "1h"}
LONG_PROMPT = "Explain this module line by line.\n" + "def handler(request):\n    pass\n" * 200


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def interpolate(expr: str) -> str:
    """The query as Grafana sends it: its intervals and the dashboard's variables filled in."""
    for name, value in GRAFANA_INTERVALS.items():
        expr = expr.replace(name, value)
    for variable in dashboard()["templating"]["list"]:
        value = str(variable["current"]["value"])
        expr = expr.replace("${" + variable["name"] + "}", value)
        expr = re.sub(rf"\${variable['name']}\b", value, expr)
    return expr


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(metric name, label names matched) of every vector selector in the parsed query."""
    found: list[tuple[str, set[str]]] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name in {expr}"
            found.append((node.name, {m.name for m in node.matchers.matchers}))
        return True

    promql_parser.walk(promql_parser.parse(interpolate(expr)), visit)
    return found


def queries() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels() for t in p["targets"]]


@pytest.fixture(scope="module")
def scraped(frontier_sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`/metrics` of a gateway on the compose config, after representative traffic."""
    env = entrypoint_environment({"SWITCHYARD_FRONTIER_SIM": frontier_sim.base_url})
    tmp = tmp_path_factory.mktemp("gateway")
    env |= {
        "SWITCHYARD_STORE_URL": f"sqlite:///{tmp / 'traffic.db'}",
        "SWITCHYARD_REDIS_URL": "redis://127.0.0.1:6379/0",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            if key.startswith(("SWITCHYARD_", "OPENAI_", "ANTHROPIC_")):
                patch.setenv(key, value)
        data = load_yaml(DEPLOY / "compose" / "gateway.yaml")
        private = f"switchyard-test:{uuid.uuid4().hex[:8]}"
        data["backends"]["local"]["replicas"] = ["http://127.0.0.1:9"]  # closed: fails over
        data["store"]["spool_dir"] = str(tmp / "spool")
        data["auth"] |= {"required": False, "redis_namespace": f"{private}:rl"}
        data["fleet"]["name"] = private
        gateway = GatewayThread(parse_config(data), use_store=True).start()
        try:
            with httpx.Client(base_url=gateway.base_url, timeout=60) as client:
                for model, prompt in (
                    ("gpt-4o-mini", LONG_PROMPT),
                    ("gpt-4o-mini", LONG_PROMPT),  # the second read hits the provider's cache
                    (LOCAL_MODEL_NAME, "def f(x):"),  # the replica is down: failover
                    ("claude-haiku-4-5", "Say hi."),
                ):
                    body = {"model": model, "messages": [{"role": "user", "content": prompt}]}
                    assert client.post("/v1/chat/completions", json=body).status_code == 200
                stream = {
                    "model": "gpt-4o-mini",
                    "stream": True,
                    "messages": [{"role": "user", "content": "Count to three."}],
                }
                with client.stream("POST", "/v1/chat/completions", json=stream) as response:
                    assert response.status_code == 200
                    response.read()
                yield client.get("/metrics").text
        finally:
            gateway.stop()
            drop_redis_keys(env["SWITCHYARD_REDIS_URL"], private)


@pytest.fixture(scope="module")
def exported(scraped: str) -> dict[str, set[str]]:
    """Sample name (`_bucket`, `_total`, ... included) -> the label names it carries."""
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(scraped):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def test_every_query_is_valid_promql() -> None:
    assert queries()
    for title, expr in queries():
        try:
            promql_parser.parse(interpolate(expr))
        except ValueError as exc:
            pytest.fail(f"{title}: {expr}: {exc}")


def test_every_metric_the_dashboard_reads_is_exported_by_the_gateway(
    exported: dict[str, set[str]],
) -> None:
    missing = [
        (title, name)
        for title, expr in queries()
        for name, _ in selectors(expr)
        if name not in exported
    ]
    assert not missing, f"not on the gateway's /metrics: {missing}"


def test_every_label_the_dashboard_matches_on_is_carried_by_its_metric(
    exported: dict[str, set[str]],
) -> None:
    wrong = [
        (title, name, sorted(matched - exported[name]))
        for title, expr in queries()
        for name, matched in selectors(expr)
        if name in exported and not matched <= exported[name]
    ]
    assert not wrong, wrong


def test_the_dashboard_covers_what_operators_watch() -> None:
    read = {name for _, expr in queries() for name, _ in selectors(expr)}
    needed = {
        "switchyard_requests_total",  # traffic by target, local share, errors
        "switchyard_request_latency_seconds_bucket",
        "switchyard_ttft_seconds_bucket",
        "switchyard_cost_usd_total",
        "switchyard_breaker_state",
        "switchyard_replica_healthy",
        "switchyard_tokens_total",  # KV cache hit rate: cached over prompt tokens
        "switchyard_store_written_total",
        "switchyard_store_healthy",
    }
    assert needed <= read, needed - read


def test_panels_are_laid_out_and_read_the_provisioned_prometheus() -> None:
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels():
        grid = panel["gridPos"]
        assert grid["w"] > 0 and grid["h"] > 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    provisioned = load_yaml(DATASOURCES)["datasources"][0]
    variable = next(v for v in dashboard()["templating"]["list"] if v["name"] == "datasource")
    assert variable["current"]["value"] == provisioned["uid"]
    assert variable["query"] == provisioned["type"] == "prometheus"


def test_the_dashboard_is_provisioned_from_where_compose_mounts_it() -> None:
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "switchyard.yaml")
    path = provider["providers"][0]["options"]["path"]
    grafana = load_yaml(DEPLOY / "compose" / "docker-compose.yml")["services"]["grafana"]
    mounts = dict(m.split(":")[:2] for m in grafana["volumes"])
    source = next(src for src, target in mounts.items() if target == path)
    assert (DEPLOY / "compose" / source).resolve() == DASHBOARD.parent
    assert Path(grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]).name == (
        DASHBOARD.name
    )
