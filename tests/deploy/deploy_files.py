"""What the deployment tests share: where deploy/ is, compose-style interpolation, and the gateway
image's entrypoint run for real to learn the environment it hands the gateway."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
ENTRYPOINT = DEPLOY / "docker" / "gateway-entrypoint.sh"
_COMPOSE_VAR = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
)


def entrypoint_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The environment the gateway image's entrypoint execs its command with, given `env`."""
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "env", "-0"],
        env={"PATH": os.environ["PATH"], **env},
        capture_output=True,
        check=True,
        text=True,
    )
    pairs = (item.split("=", 1) for item in result.stdout.split("\0") if item)
    return {key: value for key, value in pairs}


def compose_interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's `${VAR}`, `${VAR:-default}` and `${VAR:?error}` (the forms deploy/ uses)."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match.group("name", "op", "arg")
        if env.get(name):
            return env[name]
        if op and op.endswith("?"):
            raise KeyError(f"compose needs {name}: {arg}")
        return arg or ""

    return _COMPOSE_VAR.sub(substitute, value)


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
