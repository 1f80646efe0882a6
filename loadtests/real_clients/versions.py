"""Which coding clients exist, where they come from, and which version "newest" and "pinned" mean.

A version is asked for as ``"pinned"`` (the version in :data:`CLIENTS`, what the suite last
passed with), ``"newest"`` (the registry's latest release, read at run time, so a new release is
tested the day it ships) or an exact version string. Registries are asked through their own
clients, which honour the machine's registry settings (mirrors, certificates):

- npm: ``npm view PKG@VERSION version engines.node --json`` (the newest release is the
  ``latest`` dist-tag); ``engines.node`` says which Node the release needs (Claude Code 2.1.332
  asks ``>=22.0.0``), read by :func:`node_major_required`;
- PyPI: ``python3 -m pip index versions PKG`` (its first line, ``PKG (X.Y)``, is the newest).

Pins are updated by hand after a green run with ``newest`` (the pin is a known-good version, not
a cache). Names are the ``--client`` values of the CLI and the test ids.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

Registry = Literal["npm", "pypi"]
VersionChoice = Literal["newest", "pinned"]

# Seconds one registry query may take; a registry slower than this is treated as unreachable.
REGISTRY_TIMEOUT_S: Final = 120.0


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """One client: ``package`` on ``registry``, run as ``executable``, known good at ``pinned``."""

    name: str
    registry: Registry
    package: str
    pinned: str
    executable: str


CLIENTS: Final[dict[str, ClientSpec]] = {
    spec.name: spec
    for spec in (
        ClientSpec("claude-code", "npm", "@anthropic-ai/claude-code", "2.1.197", "claude"),
        ClientSpec("codex", "npm", "@openai/codex", "0.171.0", "codex"),
        ClientSpec("continue", "npm", "@continuedev/cli", "1.5.47", "cn"),
        ClientSpec("aider", "pypi", "aider-chat", "0.86.2", "aider"),
        ClientSpec("llm", "pypi", "llm", "0.36", "llm"),
    )
}


class RegistryError(RuntimeError):
    """A registry could not be asked, or its answer could not be read; the message names it."""


def client_spec(name: str) -> ClientSpec:
    """The spec of ``name``; ``KeyError`` naming the known clients otherwise."""
    try:
        return CLIENTS[name]
    except KeyError:
        raise KeyError(f"unknown client {name!r}; known: {', '.join(CLIENTS)}") from None


def base_python() -> Path:
    """The interpreter the project's virtual environment was made from (not the venv's own).

    Why: the Python clients get venvs of their own (aider pins many packages the project also
    uses); a venv made from inside another venv still works, but starting from the base
    interpreter keeps the project's site-packages out of any doubt.
    """
    for name in ("python3", "python"):
        candidate = Path(sys.base_prefix) / "bin" / name
        if candidate.exists():
            return candidate
    return Path(sys.executable)


def _run_registry(argv: list[str], registry: str) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=REGISTRY_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RegistryError(f"{registry}: {' '.join(argv)} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise RegistryError(f"{registry}: {' '.join(argv)} exited {done.returncode}: {tail}")
    return done.stdout


def npm_view(package: str, version: str = "latest") -> tuple[str, str | None]:
    """``(version, engines.node or None)`` of ``package@version`` on the npm registry."""
    out = _run_registry(
        ["npm", "view", f"{package}@{version}", "version", "engines", "--json"], "npm registry"
    )
    try:
        data = json.loads(out)
    except json.JSONDecodeError as exc:
        raise RegistryError(f"npm registry: unreadable answer for {package}: {out[:200]}") from exc
    if isinstance(data, list):  # a range matching several versions: the last is the highest
        data = data[-1]
    if isinstance(data, str):  # a release without `engines`: npm prints the version alone
        data = {"version": data}
    if not isinstance(data, dict) or not isinstance(data.get("version"), str):
        raise RegistryError(f"npm registry: no version of {package}@{version}: {out[:200]}")
    engines = data.get("engines")
    node = engines.get("node") if isinstance(engines, dict) else None
    return data["version"], node if isinstance(node, str) else None


def pypi_newest(package: str) -> str:
    """The newest release of ``package`` on the package index pip is configured for."""
    out = _run_registry(
        [str(base_python()), "-m", "pip", "index", "versions", package, "--no-color"],
        "PyPI",
    )
    match = re.search(rf"^{re.escape(package)} \(([^)]+)\)", out, re.MULTILINE | re.IGNORECASE)
    if match is None:
        raise RegistryError(f"PyPI: no version of {package} in: {out[:200]}")
    return match.group(1)


def resolve_version(name: str, choice: str) -> str:
    """The exact version ``choice`` ("newest", "pinned" or a version) means for client ``name``."""
    spec = client_spec(name)
    if choice == "pinned":
        return spec.pinned
    if choice != "newest":
        return choice
    if spec.registry == "npm":
        return npm_view(spec.package)[0]
    return pypi_newest(spec.package)


def versions_to_test(name: str) -> dict[str, str]:
    """``{"newest": exact, "pinned": exact}`` for client ``name``, without the pin where the
    registry's newest release is the pin (one install and one run, not two)."""
    newest, pinned = resolve_version(name, "newest"), resolve_version(name, "pinned")
    return {"newest": newest} if pinned == newest else {"newest": newest, "pinned": pinned}


def node_major_required(engines_node: str | None) -> int | None:
    """The lowest Node major an ``engines.node`` range allows (``">=22.0.0"`` -> 22), or None.

    Only the lower bound matters here: it says whether the machine's Node is too old.
    """
    if not engines_node:
        return None
    match = re.search(r"(\d+)", engines_node)
    return int(match.group(1)) if match else None
