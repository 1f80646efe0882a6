"""The Kubernetes manifests: rendered by kustomize (`kubectl kustomize`), validated against the
Kubernetes API schemas (kubernetes-validate, strict: unknown fields are errors), and checked
against the code they deploy (the gateway config parses, the probes hit real routes, the GPU
replicas run exactly the launch preset's command, the weight publisher Job writes the volume the
replicas read and swaps the replicas the gateway lists). What the publisher's and the replicas'
hook scripts do is tested in test_weights_publishing.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from gateway.app import stop_deadline_s
from gateway.config import LimitsConfig, parse_config
from serving.hotswap import HotSwapConfig
from serving.launch import launch_config
from serving.names import ADMIN_TOKEN_ENV
from serving.vllm_config import ENTRYPOINT_MODULE
from tests.deploy.deploy_files import DEPLOY, entrypoint_environment

K8S = DEPLOY / "k8s"
BASE, GPU = K8S / "base", K8S / "overlays" / "gpu"
PUBLISH = GPU / "publish"  # the weight publisher: a template Job, applied once per publish
KUBERNETES_VERSION = "1.32"  # the oldest minor release still maintained upstream
GPU_PRESET = "gpu-fp8-lmcache"
GATEWAY_PROBES = {"readinessProbe": "/ready", "livenessProbe": "/health"}


@cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=True
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def find(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    assert len(matches) == 1, f"{len(matches)} {kind} named {name}"
    return matches[0]


def container(workload: dict[str, Any]) -> dict[str, Any]:
    (only,) = workload["spec"]["template"]["spec"]["containers"]
    return dict(only)


def gateway_config_text(docs: tuple[dict[str, Any], ...]) -> str:
    deployment = find(docs, "Deployment", "switchyard-gateway")
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    name = next(v["configMap"]["name"] for v in volumes if "configMap" in v)
    return str(find(docs, "ConfigMap", name)["data"]["gateway.yaml"])


FLEET_KINDS = {
    "Namespace",
    "Deployment",
    "Service",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "ConfigMap",
    "Secret",
    "StatefulSet",
    "NetworkPolicy",
}


def models_volume(workload: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The workload's `models` volume and its mount."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    mount = next(m for m in container(workload)["volumeMounts"] if m["name"] == "models")
    return volumes["models"], mount


def shipped_file(docs: tuple[dict[str, Any], ...], workload: dict[str, Any], path: str) -> str:
    """What the workload's container finds at `path`, from the ConfigMap mounted above it."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    mounts = container(workload)["volumeMounts"]
    mount = next(m for m in mounts if Path(path).parent == Path(m["mountPath"]))
    config_map = find(docs, "ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    return str(config_map["data"][Path(path).name])


def expand(words: list[str], env: list[dict[str, Any]]) -> list[str]:
    """Kubernetes' `$(VAR)` expansion of a command from the container's plain env values."""
    values = {e["name"]: e["value"] for e in env if "value" in e}
    return [re.sub(r"\$\((\w+)\)", lambda m: values.get(m[1], m[0]), w) for w in words]


@pytest.mark.parametrize(
    ("directory", "kinds"),
    [
        (BASE, FLEET_KINDS),
        (GPU, FLEET_KINDS | {"PersistentVolumeClaim"}),
        (PUBLISH, {"Job", "ConfigMap"}),
    ],
    ids=["base", "gpu", "publish"],
)
def test_every_rendered_manifest_is_valid_for_the_kubernetes_api(
    directory: Path, kinds: set[str]
) -> None:
    docs = render(directory)
    assert {d["kind"] for d in docs} >= kinds
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {exc.path}")
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "switchyard"


@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_the_configmap_holds_a_gateway_config_that_loads_with_the_pod_environment(
    directory: Path,
) -> None:
    docs = render(directory)
    secret = find(docs, "Secret", "switchyard-secrets")["stringData"]
    deployment = find(docs, "Deployment", "switchyard-gateway")
    assert container(deployment)["envFrom"] == [{"secretRef": {"name": "switchyard-secrets"}}]
    filled = {
        key: "postgresql://u@db/s" if key.endswith("STORE_URL") else "redis://r:6379/0"
        for key in secret
        if key.endswith("_URL")
    }
    env = entrypoint_environment({**dict.fromkeys(secret, ""), **filled})
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        config = parse_config(yaml.safe_load(gateway_config_text(docs)), "ConfigMap")
    assert config.store.url == filled["SWITCHYARD_STORE_URL"]
    assert config.fleet.backend == "redis" and config.auth.rate_limit_backend == "redis"
    assert config.backends["frontier-openai"].api_base == "https://api.openai.com/v1"
    assert config.backends["frontier-openai"].api_key_env in secret
    assert config.backends["frontier-anthropic"].api_key_env in secret


@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_the_gateway_deployment_serves_what_its_probes_and_service_expect(
    directory: Path,
) -> None:
    docs = render(directory)
    deployment = find(docs, "Deployment", "switchyard-gateway")
    gateway = container(deployment)
    config = yaml.safe_load(gateway_config_text(docs))
    port = config["gateway"]["listen"]["port"]
    args = gateway["args"]
    assert args[args.index("--port") + 1] == str(port)
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    assert ports["http"] == port
    for probe, path in GATEWAY_PROBES.items():
        assert gateway[probe]["httpGet"] == {"path": path, "port": "http"}
    mounts = {m["name"]: m["mountPath"] for m in gateway["volumeMounts"]}
    assert Path(args[args.index("--config") + 1]).parent == Path(mounts["config"])
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for kind in ("PodDisruptionBudget", "Service"):
        resource = find(docs, kind, "switchyard-gateway")
        selector = resource["spec"]["selector"]
        assert selector.get("matchLabels", selector).items() <= labels.items(), kind
    target = find(docs, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", "switchyard-gateway")
    # After the preStop pause, SIGTERM drains, aborts what is left and records it, then the
    # record writer flushes: the pod is killed only past all of it.
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    pause = gateway["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep"
    limits = LimitsConfig.model_validate(config["gateway"].get("limits", {}))
    assert grace > float(pause[1]) + stop_deadline_s(limits)


@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_the_gateway_lists_each_vllm_replica_by_its_stable_address(directory: Path) -> None:
    docs = render(directory)
    statefulset = find(docs, "StatefulSet", "vllm")
    service = find(docs, "Service", statefulset["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= (
        statefulset["spec"]["template"]["metadata"]["labels"].items()
    )
    port = next(p["containerPort"] for p in container(statefulset)["ports"])
    config = yaml.safe_load(gateway_config_text(docs))
    name, service_name = statefulset["metadata"]["name"], service["metadata"]["name"]
    assert config["backends"]["local"]["replicas"] == [
        f"http://{name}-{i}.{service_name}:{port}" for i in range(statefulset["spec"]["replicas"])
    ]


def test_base_replicas_are_the_cpu_image_without_gpus() -> None:
    vllm = container(find(render(BASE), "StatefulSet", "vllm"))
    assert vllm["image"].startswith("switchyard-vllm-cpu")
    assert "nvidia.com/gpu" not in str(vllm["resources"])


def test_gpu_replicas_request_a_gpu_and_run_the_launch_preset_command() -> None:
    docs = render(GPU)
    statefulset = find(docs, "StatefulSet", "vllm")
    vllm = container(statefulset)
    assert vllm["image"].startswith("switchyard-vllm-gpu")
    for side in ("requests", "limits"):
        assert vllm["resources"][side]["nvidia.com/gpu"] == "1"
    args = vllm["args"]
    mounts = {m["name"]: m["mountPath"] for m in vllm["volumeMounts"]}
    expected = launch_config(
        GPU_PRESET,
        model_dir=Path(args[args.index("--model") + 1]),
        cache_dir=Path(mounts["cache"]),
        port=int(args[args.index("--port") + 1]),
        host="0.0.0.0",
    )
    assert vllm["command"] == ["python3", "-m", ENTRYPOINT_MODULE]
    assert args == expected.command()[3:]
    assert {e["name"]: e["value"] for e in vllm["env"]} == expected.environment({})
    assert Path(args[args.index("--model") + 1]).is_relative_to(mounts["models"])
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["models"]["persistentVolumeClaim"]["claimName"]
    find(docs, "PersistentVolumeClaim", claim)
    tolerations = statefulset["spec"]["template"]["spec"]["tolerations"]
    assert any(t["key"] == "nvidia.com/gpu" for t in tolerations)


@pytest.mark.parametrize("directory", [BASE, GPU], ids=["base", "gpu"])
def test_only_the_gateways_reach_the_replicas_dev_routes(directory: Path) -> None:
    """The replicas' port (with vLLM's dev routes for the hot swap) admits the gateway pods,
    labelled clients and a labelled metrics namespace, and selects the replicas' own pods."""
    docs = render(directory)
    policy = find(docs, "NetworkPolicy", "vllm-ingress")
    replicas = find(docs, "StatefulSet", "vllm")
    labels = replicas["spec"]["template"]["metadata"]["labels"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    assert selected.items() <= labels.items()
    (rule,) = policy["spec"]["ingress"]
    gateway = find(docs, "Deployment", "switchyard-gateway")["spec"]["template"]["metadata"]
    sources = [peer.get("podSelector", {}).get("matchLabels", {}) for peer in rule["from"]]
    assert any(s and s.items() <= gateway["labels"].items() for s in sources)
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_the_models_volume_is_shared_read_write_and_the_replicas_mount_it_read_only() -> None:
    docs = render(GPU)
    claim = find(docs, "PersistentVolumeClaim", "switchyard-models")["spec"]
    assert claim["accessModes"] == ["ReadWriteMany"]  # every replica and the publisher at once
    assert claim["storageClassName"]  # a cluster's default class is most often block storage
    volume, mount = models_volume(find(docs, "StatefulSet", "vllm"))
    assert volume["persistentVolumeClaim"] == {"claimName": "switchyard-models", "readOnly": True}
    assert mount["readOnly"] is True


def test_the_publisher_job_writes_the_models_volume_where_the_replicas_read_it() -> None:
    replicas = find(render(GPU), "StatefulSet", "vllm")
    job = find(render(PUBLISH), "Job", "switchyard-publish-weights")
    served, served_at = models_volume(replicas)
    written, written_at = models_volume(job)
    claim = written["persistentVolumeClaim"]
    assert claim["claimName"] == served["persistentVolumeClaim"]["claimName"]
    assert not claim.get("readOnly") and not written_at.get("readOnly")
    # One path on both sides: serving.hotswap sends the replicas the path it resolves here.
    assert written_at["mountPath"] == served_at["mountPath"]
    publish = container(job)
    command = expand(publish["command"], publish["env"])
    root = Path(command[command.index("--models-root") + 1])
    assert root == Path(written_at["mountPath"])
    args = container(replicas)["args"]
    assert Path(args[args.index("--model") + 1]) == root / "current"  # what it repoints
    checkpoint = Path(command[command.index("--checkpoint") + 1])
    others = [m["mountPath"] for m in publish["volumeMounts"] if m["name"] != "models"]
    assert any(checkpoint.is_relative_to(path) for path in others)


def test_the_publisher_job_runs_the_publish_script_of_this_repository() -> None:
    docs = render(PUBLISH)
    job = find(docs, "Job", "switchyard-publish-weights")
    command = container(job)["command"]
    assert command[0] == "python" and command[-1] == "--"  # the swap command follows: args
    script = PUBLISH / Path(command[1]).name
    assert shipped_file(docs, job, command[1]) == script.read_text()


def test_the_publisher_job_swaps_every_listed_replica_and_is_admitted_to_them() -> None:
    gpu = render(GPU)
    job = find(render(PUBLISH), "Job", "switchyard-publish-weights")
    publish = container(job)
    args = publish["args"]
    assert args[:3] == ["python", "-m", "serving.hotswap"]
    config = yaml.safe_load(gateway_config_text(gpu))
    target = HotSwapConfig.model_fields["target"].default
    replicas = [args[i + 1] for i, word in enumerate(args) if word == "--replica"]
    assert replicas == config["backends"][target]["replicas"]
    gateway = urlsplit(args[args.index("--gateway") + 1])
    service = find(gpu, "Service", "switchyard-gateway")
    assert gateway.hostname == service["metadata"]["name"]
    assert (gateway.port or 80) in [p["port"] for p in service["spec"]["ports"]]
    token = {e["name"]: e for e in publish["env"]}[ADMIN_TOKEN_ENV]["valueFrom"]["secretKeyRef"]
    assert token["key"] in find(gpu, "Secret", token["name"])["stringData"]
    gateway_image = container(find(gpu, "Deployment", "switchyard-gateway"))["image"]
    assert publish["image"] == gateway_image  # the image with `serving`, at the fleet's tag
    # The replicas' port admits it (vllm-ingress: the gateways and labelled clients).
    labels = job["spec"]["template"]["metadata"]["labels"]
    (rule,) = find(gpu, "NetworkPolicy", "vllm-ingress")["spec"]["ingress"]
    sources = [peer.get("podSelector", {}).get("matchLabels", {}) for peer in rule["from"]]
    assert any(s and s.items() <= labels.items() for s in sources)
    # A publish that failed or rolled back is read in its logs, never run again on its own.
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_gpu_replicas_state_the_version_of_the_checkpoint_they_loaded_once_up() -> None:
    docs = render(GPU)
    statefulset = find(docs, "StatefulSet", "vllm")
    vllm = container(statefulset)
    hook = vllm["lifecycle"]["postStart"]["exec"]["command"]
    assert hook[0] == "python3"
    script = GPU / Path(hook[1]).name
    assert shipped_file(docs, statefulset, hook[1]) == script.read_text()
    args = vllm["args"]
    assert hook[2] == args[args.index("--model") + 1]
    server = urlsplit(hook[3])
    assert server.hostname == "127.0.0.1"
    assert server.port == next(p["containerPort"] for p in vllm["ports"])
    startup = vllm["startupProbe"]  # the hook waits for the server as long as the probe would
    budget = startup["periodSeconds"] * startup["failureThreshold"]
    assert float(hook[hook.index("--within-s") + 1]) == budget
