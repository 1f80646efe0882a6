"""Install a coding client, once, into ``$SWITCHYARD_CACHE/clients/<client>-<version>/``.

:func:`install` is idempotent: a finished install leaves ``installed.json`` (what was installed
and where its executable is) and is reused as it is; a directory without it (an install that
died) is removed and done again. A per-target lock file (``fcntl.flock``) makes a second process
asking for the same client and version wait for the first instead of installing beside it.

- npm clients: ``npm install --prefix <dir> PKG@VERSION``; the executable is
  ``<dir>/node_modules/.bin/<bin>``. When the release's ``engines.node`` asks for a newer Node
  than the machine's, Node itself is installed the same way (``npm install --prefix
  <cache>/clients/node-<major> node@<major>``) and put first on ``PATH`` for the install and for
  every run (:attr:`InstalledClient.path_dirs`).
- PyPI clients: a venv of their own made with the base interpreter
  (:func:`loadtests.real_clients.versions.base_python`), then ``pip install PKG==VERSION``: aider
  pins dozens of packages that must not meet the project's.

An install that fails raises :class:`ClientInstallError`, naming the registry and the command
with the tail of its output.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from loadtests.real_clients.versions import (
    ClientSpec,
    RegistryError,
    base_python,
    client_spec,
    node_major_required,
    npm_view,
    resolve_version,
)

REPO = Path(__file__).resolve().parents[2]
MARKER: Final = "installed.json"
# Seconds one install command may take (aider's venv takes ~3 minutes on 2 cores, cold).
INSTALL_TIMEOUT_S: Final = 1200.0


class ClientInstallError(RuntimeError):
    """An install failed; the message names the registry, the command and its output's tail."""


@dataclass(frozen=True, slots=True)
class InstalledClient:
    """A client ready to run: ``executable``, with ``path_dirs`` first on ``PATH`` (Node)."""

    name: str
    version: str
    executable: Path
    path_dirs: tuple[Path, ...] = ()
    seconds: float = 0.0  # how long this call took (0 when reused)


def clients_dir(cache_dir: Path | None = None) -> Path:
    """``<cache>/clients``; the cache is ``cache_dir``, else ``$SWITCHYARD_CACHE``, else .cache."""
    cache = cache_dir or Path(os.environ.get("SWITCHYARD_CACHE") or REPO / ".cache")
    return cache.resolve() / "clients"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(argv: list[str], registry: str, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClientInstallError(f"{registry}: {' '.join(argv)} failed: {exc}") from exc
    if done.returncode != 0:
        tail = (done.stderr + done.stdout).strip()[-1500:]
        raise ClientInstallError(
            f"install from {registry} failed: {' '.join(argv)} exited {done.returncode}:\n{tail}"
        )


def _reuse(target: Path) -> InstalledClient | None:
    marker = target / MARKER
    if not marker.exists():
        return None
    data = json.loads(marker.read_text())
    found = InstalledClient(
        name=data["name"],
        version=data["version"],
        executable=Path(data["executable"]),
        path_dirs=tuple(Path(p) for p in data["path_dirs"]),
    )
    return found if found.executable.exists() else None


def _once(target: Path, build: Callable[[], InstalledClient]) -> InstalledClient:
    """Under ``target``'s lock: the finished install there, or ``build()`` after a clean slate."""
    with _locked(target.parent / f".{target.name}.lock"):
        found = _reuse(target)
        if found is not None:
            return found
        if target.exists():
            shutil.rmtree(target)  # an install that died part way
        target.mkdir(parents=True)
        started = time.monotonic()
        try:
            made = build()
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)  # no half install left to trip over
            raise
        (target / MARKER).write_text(
            json.dumps(
                {
                    "name": made.name,
                    "version": made.version,
                    "executable": str(made.executable),
                    "path_dirs": [str(p) for p in made.path_dirs],
                },
                indent=1,
            )
        )
        return InstalledClient(
            made.name, made.version, made.executable, made.path_dirs, time.monotonic() - started
        )


def system_node_major() -> int | None:
    """The major version of ``node`` on PATH, or None without one."""
    try:
        out = subprocess.run(
            ["node", "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except OSError:
        return None
    digits = out.strip().lstrip("v").split(".")[0]
    return int(digits) if digits.isdigit() else None


def install_node(major: int, cache_dir: Path | None = None) -> Path:
    """A Node ``major`` from npm (package ``node@<major>``); returns the dir holding ``node``."""
    target = clients_dir(cache_dir) / f"node-{major}"

    def build() -> InstalledClient:
        _run(["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund",
              f"node@{major}"], "the npm registry")  # fmt: skip
        return InstalledClient("node", str(major), target / "node_modules" / ".bin" / "node")

    return _once(target, build).executable.parent


def _npm_install(
    spec: ClientSpec, version: str, target: Path, cache: Path | None
) -> InstalledClient:
    try:
        _, engines_node = npm_view(spec.package, version)
    except RegistryError as exc:
        raise ClientInstallError(str(exc)) from exc
    needed = node_major_required(engines_node)
    have = system_node_major()
    path_dirs: tuple[Path, ...] = ()
    if needed is not None and (have is None or have < needed):
        path_dirs = (install_node(needed, cache),)
    env = {**os.environ, "PATH": os.pathsep.join([*map(str, path_dirs), os.environ["PATH"]])}
    _run(["npm", "install", "--prefix", str(target), "--no-audit", "--no-fund",
          f"{spec.package}@{version}"], "the npm registry", env)  # fmt: skip
    exe = target / "node_modules" / ".bin" / spec.executable
    if not exe.exists():
        raise ClientInstallError(f"npm installed {spec.package}@{version} but no {exe}")
    return InstalledClient(spec.name, version, exe, path_dirs)


def _pypi_install(spec: ClientSpec, version: str, target: Path) -> InstalledClient:
    _run([str(base_python()), "-m", "venv", str(target)], "PyPI (venv)")
    pip = [str(target / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--quiet", f"{spec.package}=={version}"], "PyPI")
    exe = target / "bin" / spec.executable
    if not exe.exists():
        raise ClientInstallError(f"pip installed {spec.package}=={version} but no {exe}")
    return InstalledClient(spec.name, version, exe)


def install(client: str, version: str, cache_dir: Path | None = None) -> InstalledClient:
    """``client`` at ``version`` ("newest", "pinned" or exact), installed once and reused.

    Raises ``KeyError`` for an unknown client, :class:`ClientInstallError` when the registry
    cannot be asked or the install fails.
    """
    spec = client_spec(client)
    try:
        exact = resolve_version(client, version)
    except RegistryError as exc:
        raise ClientInstallError(str(exc)) from exc
    target = clients_dir(cache_dir) / f"{client}-{exact}"
    if spec.registry == "npm":
        return _once(target, lambda: _npm_install(spec, exact, target, cache_dir))
    return _once(target, lambda: _pypi_install(spec, exact, target))
