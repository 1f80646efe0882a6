"""The LiteLLM proxy, the comparison point: its own venv, its config, its command line.

The project venv has litellm as an SDK only; the proxy's extras (and their pins) live in a venv
of their own under ``.cache/bench/litellm-proxy-venv``, made once with ``python3 -m venv`` and
``pip install 'litellm[proxy]==<LITELLM_VERSION>'``; a marker file makes the install idempotent.

Configured like the gateway's frontier path: one model, ``gpt-4o-mini`` -> ``openai/gpt-4o-mini``
at the simulator's ``/v1`` (the upstream call of the gateway's ``frontier_openai``), retries off,
one worker, a master key, no database, the local price map (no network), and uvicorn's access
log off (``LITELLM_LOG=ERROR``), as the gateway runs without one. OpenAI format only: it is the
like-for-like comparison for the gateway's OpenAI-format frontier path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

import yaml

from loadtests.bench.gateway.settings import FRONTIER_OPENAI_MODEL, LITELLM_VERSION

MASTER_KEY: Final = "sk-bench-master-key"
READY_PATH: Final = "/health/liveliness"
ENV: Final = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}


class ProxyInstallError(RuntimeError):
    """The proxy's venv could not be made; the message has pip's last lines."""


def _marker(venv: Path) -> Path:
    return venv / f".switchyard-litellm-proxy-{LITELLM_VERSION}"


def proxy_executable(venv: Path) -> Path:
    return venv / "bin" / "litellm"


def is_installed(venv: Path) -> bool:
    return _marker(venv).exists() and proxy_executable(venv).exists()


def ensure_installed(venv: Path, say: Callable[[str], None] = print) -> Path:
    """The ``litellm`` CLI of the proxy venv, installing it first when missing (minutes);
    progress goes to ``say``."""
    if is_installed(venv):
        say(f"LiteLLM proxy {LITELLM_VERSION}: already installed in {venv}")
        return proxy_executable(venv)
    steps: list[tuple[str, list[str]]] = []
    if not (venv / "bin" / "python").exists():
        steps.append(("creating venv", ["python3", "-m", "venv", str(venv)]))
    pip = str(venv / "bin" / "pip")
    steps.append(
        (
            f"pip install 'litellm[proxy]=={LITELLM_VERSION}' (a few minutes)",
            [pip, "install", "--disable-pip-version-check", f"litellm[proxy]=={LITELLM_VERSION}"],
        )
    )
    for label, argv in steps:
        say(f"LiteLLM proxy: {label} ...")
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
            raise ProxyInstallError(f"{label} failed ({done.returncode}):\n{tail}")
    _marker(venv).write_text(f"litellm[proxy]=={LITELLM_VERSION}\n")
    say(f"LiteLLM proxy: installed in {venv}")
    return proxy_executable(venv)


def write_config(path: Path, simulator_url: str) -> Path:
    config = {
        "model_list": [
            {
                "model_name": FRONTIER_OPENAI_MODEL,
                "litellm_params": {
                    "model": f"openai/{FRONTIER_OPENAI_MODEL}",
                    "api_base": f"{simulator_url}/v1",
                    "api_key": "sk-simulator",
                    "num_retries": 0,
                    "max_retries": 0,
                },
            }
        ],
        "litellm_settings": {"num_retries": 0, "request_timeout": 60},
        "router_settings": {"num_retries": 0},
        "general_settings": {"master_key": MASTER_KEY},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def command(executable: Path, config_path: Path, port: int) -> list[str]:
    return [
        str(executable),
        "--config",
        str(config_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
    ]


def auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {MASTER_KEY}"}
