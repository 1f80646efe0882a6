"""Shared fixtures: real servers on loopback, each started once per session."""

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REAL_CLIENT_TESTS = "tests/loadtests/test_real_clients.py"

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = [
    "tests.fixtures.simulator_fixture",
    "tests.fixtures.vllm_fixture",
    "tests.fixtures.gateway_fixture",
    "tests.fixtures.postgres_fixture",
]


# -- the real clients' installs, ahead of their tests ------------------------------------------
# Installing the newest and pinned coding clients waits on npm and PyPI for minutes on a cold
# cache; started when the session has collected the tests that run them, the installs overlap
# the tests before those (loadtests/real_clients/prefetch.py). Stopped at the session's end.
_PREFETCH = pytest.StashKey[subprocess.Popen[bytes]]()
_PREFETCH_STOP_S = 10.0


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any(item.nodeid.startswith(REAL_CLIENT_TESTS) for item in session.items):
        return
    if shutil.which("npm") is None:
        return  # the tests skip, saying why
    cache = os.environ.get("SWITCHYARD_CACHE") or Path(session.config.rootpath) / ".cache"
    log = Path(cache) / "real_clients_prefetch.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        session.config.stash[_PREFETCH] = subprocess.Popen(
            [sys.executable, "-m", "loadtests.real_clients.prefetch"],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=session.config.rootpath,
            start_new_session=True,
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    proc = session.config.stash.get(_PREFETCH, None)
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(_PREFETCH_STOP_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
