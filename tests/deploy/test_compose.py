"""The one-host compose file, parsed (no Docker engine runs here): every reference in it resolves
(services, files it mounts or builds from, ports), and the gateway config it mounts loads with
the environment compose and the image's entrypoint give the gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.app import stop_deadline_s
from gateway.config import parse_config
from tests.deploy.deploy_files import (
    DEPLOY,
    compose_interpolate,
    entrypoint_environment,
    load_yaml,
)

COMPOSE_DIR = DEPLOY / "compose"
GATEWAYS = ("gateway-1", "gateway-2")
ADMIN_TOKEN = "compose-test-token"


def compose() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(COMPOSE_DIR / "docker-compose.yml")
    return data


def services() -> dict[str, Any]:
    found: dict[str, Any] = compose()["services"]
    return found


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def gateway_environment(service: str, host_env: dict[str, str]) -> dict[str, str]:
    """What the gateway process of `service` sees: compose's interpolation of its
    `environment`, then the image's entrypoint."""
    declared = services()[service]["environment"]
    return entrypoint_environment(
        {key: compose_interpolate(str(value), host_env) for key, value in declared.items()}
    )


def test_the_deployment_has_every_part_of_one_host() -> None:
    assert set(services()) == {
        *GATEWAYS,
        "vllm",
        "frontier-sim",
        "postgres",
        "redis",
        "prometheus",
        "grafana",
    }


def test_every_dependency_names_a_service_that_can_report_its_condition() -> None:
    dockerfile_healthchecks = {
        name
        for name, service in services().items()
        if "build" in service
        and "HEALTHCHECK" in (DEPLOY.parent / service["build"]["dockerfile"]).read_text()
    }
    for name, service in services().items():
        depends = service.get("depends_on", {})
        conditions = depends if isinstance(depends, dict) else {key: {} for key in depends}
        for dependency, condition in conditions.items():
            assert dependency in services(), f"{name} depends on unknown {dependency}"
            if condition.get("condition") == "service_healthy":
                assert "healthcheck" in services()[dependency] or (
                    dependency in dockerfile_healthchecks
                ), f"{dependency} has no healthcheck for {name} to wait on"


def test_every_build_and_mount_points_at_files_in_the_repository() -> None:
    for name, service in services().items():
        if "build" in service:
            context = (COMPOSE_DIR / service["build"]["context"]).resolve()
            assert context == DEPLOY.parent, name
            assert (context / service["build"]["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in compose()["volumes"], f"{name}: undeclared volume {source}"


def test_the_admin_token_must_be_given() -> None:
    with pytest.raises(KeyError, match="SWITCHYARD_ADMIN_TOKEN"):
        gateway_environment(GATEWAYS[0], {})


@pytest.mark.parametrize(
    ("host_env", "openai_base"),
    [
        ({}, "http://frontier-sim:8901/v1"),
        ({"OPENAI_API_KEY": "sk-test"}, "https://api.openai.com/v1"),
    ],
    ids=["no-keys-simulator", "openai-key-real-provider"],
)
def test_each_gateway_loads_its_config_against_the_services_of_the_file(
    host_env: dict[str, str], openai_base: str
) -> None:
    sim = services()["frontier-sim"]
    sim_port = flag(sim["command"], "--port")
    for service in GATEWAYS:
        env = gateway_environment(service, {"SWITCHYARD_ADMIN_TOKEN": ADMIN_TOKEN, **host_env})
        mounts = dict(v.split(":")[:2] for v in services()[service]["volumes"])
        config_path = flag(services()[service]["command"], "--config")
        source = next(src for src, target in mounts.items() if target == config_path)
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            config = parse_config(load_yaml(COMPOSE_DIR / source), source)
        assert env["SWITCHYARD_ADMIN_TOKEN"] == ADMIN_TOKEN
        assert config.backends["frontier-openai"].api_base == openai_base
        if not host_env:
            assert env["SWITCHYARD_FRONTIER_SIM"] == f"http://frontier-sim:{sim_port}"
        hosts = {
            "store": config.store.url.split("@")[1].split(":")[0],
            "rate limits": config.auth.redis_url.split("//")[1].split(":")[0],
            "fleet": config.fleet.redis_url.split("//")[1].split(":")[0],
        }
        assert hosts == {"store": "postgres", "rate limits": "redis", "fleet": "redis"}
        replica = config.backends["local"].replicas[0]
        assert replica.split("//")[1].split(":")[0] in services()
        assert replica.rsplit(":", 1)[1] in services()["vllm"]["expose"]
        published = [p.split(":")[1] for p in services()[service]["ports"]]
        assert published == [str(config.gateway.listen.port)]
        assert flag(services()[service]["command"], "--port") == str(config.gateway.listen.port)
        # compose kills a gateway only once it has drained and flushed its record writer
        grace = services()[service]["stop_grace_period"]
        assert grace.endswith("s") and float(grace[:-1]) > stop_deadline_s(config.gateway.limits)


def test_prometheus_scrapes_every_gateway_and_the_replica_where_they_listen() -> None:
    prometheus = services()["prometheus"]
    mounts = dict(v.split(":")[:2] for v in prometheus["volumes"])
    config_file = flag(
        [a for arg in prometheus["command"] for a in arg.split("=", 1)], "--config.file"
    )
    source = next(src for src, target in mounts.items() if target == config_file)
    scrape = load_yaml(COMPOSE_DIR / source)["scrape_configs"]
    targets = {t for job in scrape for c in job["static_configs"] for t in c["targets"]}
    gateway_port = flag(services()[GATEWAYS[0]]["command"], "--port")
    assert targets == {
        *(f"{name}:{gateway_port}" for name in GATEWAYS),
        f"vllm:{services()['vllm']['expose'][0]}",
    }
    datasource = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    published = prometheus["ports"][0].split(":")[1]
    assert datasource["datasources"][0]["url"] == f"http://prometheus:{published}"


def test_the_replica_port_is_not_published_to_the_host() -> None:
    # It runs with the hot-swap routes (vLLM dev mode): reachable from the gateways only.
    assert "ports" not in services()["vllm"]
    assert Path(services()["vllm"]["build"]["dockerfile"]).name == "vllm-cpu.Dockerfile"
