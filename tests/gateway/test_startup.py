"""The gateway starts without importing ``transformers`` or torch (torch alone takes seconds to
import and ~200 MB; the ``tokenizers`` library does the gateway's tokenizing), with a
cache-aware local target whose tokenizer it loads in the background: checked inside a fresh
interpreter running the app (``sys.modules`` after ``/ready`` answers and after the tokenizer has
loaded), and from outside a real ``python -m gateway`` process serving a request through that
target (no torch library mapped into it). FastAPI is imported (the admin API's framework:
0.1-0.2 s of a start). Behaviour only: the start-up time and its 2 s target
(``time_to_ready_s``) are the gateway benchmark's (``loadtests/bench/gateway``), never asserted
here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from loadtests.bench.servers import ServerFleet, free_port
from loadtests.frontier_sim import SimulatorConfig, ThreadedSimulator, run_in_thread
from serving.build import ensure_demo_model
from tests.fixtures.vllm_fixture import cache_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("transformers", "torch")
ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def cache_aware_config(model_dir: Path, replicas: list[str]) -> dict[str, Any]:
    """One local vLLM target, chosen among ``replicas`` by the cache-aware selector."""
    return {
        "backends": {
            "local": {
                "kind": "vllm",
                "model": "sim-local",
                "replicas": replicas,
                "tokenizer_dir": str(model_dir),
                "replica_selector": {"kind": "cache_aware", "block_size": 16},
            }
        },
        "routing": {"default": "local", "aliases": {"auto": "local"}},
        "store": {"enabled": False},
        "auth": {"required": False},
    }


# Runs in a fresh interpreter: builds the app, enters its lifespan, reports what it imported.
IN_PROCESS = textwrap.dedent(
    """
    import json, sys
    from starlette.testclient import TestClient
    from gateway.app import create_app
    from gateway.config import parse_config

    config = json.loads(sys.argv[1])
    heavy = ("transformers", "torch")
    app = create_app(parse_config(config))
    out = {"at_import": [m for m in heavy if m in sys.modules]}
    with TestClient(app) as client:
        out["ready"] = client.get("/ready").status_code
        out["at_ready"] = [m for m in heavy if m in sys.modules]
        tokenizer = next(iter(app.state.switchyard.targets.tokenizers.values()))
        out["loaded"] = tokenizer.wait(120)
        body = {"messages": [{"role": "user", "content": "hello"}]}
        out["ids"] = len(tokenizer.token_ids("chat.completions", body) or ())
        out["after_tokenizing"] = [m for m in heavy if m in sys.modules]
    print(json.dumps(out))
    """
)


def _python_json(code: str, *args: str) -> Any:
    """What ``code``, run in a fresh interpreter from the repository, printed last (JSON)."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO_ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_demo_model(cache_dir())


@pytest.fixture(scope="module")
def replica() -> Iterator[ThreadedSimulator]:
    sim = run_in_thread(SimulatorConfig())
    yield sim
    sim.stop()


def test_the_app_starts_and_tokenizes_without_transformers_or_torch(model_dir: Path) -> None:
    config = cache_aware_config(model_dir, ["http://127.0.0.1:9"])  # nothing listens there
    out = _python_json(IN_PROCESS, json.dumps(config))
    assert out["ready"] == 200
    assert out["loaded"] and out["ids"] > 0  # the tokenizer did load, and tokenizes
    assert out["at_import"] == out["at_ready"] == out["after_tokenizing"] == []


def _mapped_libraries(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        pytest.skip("no /proc/<pid>/maps to read a process's libraries from")


def test_the_gateway_process_serves_cache_aware_without_torch(
    model_dir: Path, replica: ThreadedSimulator, tmp_path: Path
) -> None:
    config_path = tmp_path / "switchyard.yaml"
    config_path.write_text(yaml.safe_dump(cache_aware_config(model_dir, [replica.base_url])))
    port = free_port()
    argv = [sys.executable, "-m", "gateway", "--config", str(config_path), "--port", str(port)]
    with ServerFleet(tmp_path / "logs") as fleet:
        gateway = fleet.spawn("gateway", argv, port, "/ready", env=ENV, cwd=REPO_ROOT)
        fleet.wait_ready(gateway, timeout_s=120)
        _wait_for_line(gateway.log_path, f"tokenizer {model_dir} loaded in")
        body = {"model": "auto", "messages": [{"role": "user", "content": "hello"}]}
        answer = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        maps = _mapped_libraries(gateway.process.pid)
    assert "tokenizers" in maps  # it did load the tokenizer's library ...
    assert "libtorch" not in maps and "/torch/" not in maps  # ... and no torch


def _wait_for_line(log_path: Path, text: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while text not in log_path.read_text():
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{log_path.read_text()}"
        time.sleep(0.05)


# Imported by the gateway only when used: the dataset pipeline (an export), httpx (litellm's
# errors, once litellm imported it), redis (a Redis rate limiter, fleet or budget), the
# OpenTelemetry SDK (traces on), tiktoken (on the thread that loads its encodings),
# the scrubber and detect-secrets: a target with a `secrets` policy (gateway.secrets).
NOT_AT_START = (
    "traffic.export.dataset",
    "httpx",
    "redis",
    "opentelemetry.sdk.trace",
    "tiktoken",
    "traffic.scrub.scrubber",
    "detect_secrets",
)


def test_importing_the_app_leaves_out_what_only_some_requests_use() -> None:
    code = "import json, sys, gateway.app; print(json.dumps(sorted(sys.modules)))"
    imported = set(_python_json(code))
    assert "gateway.app" in imported
    assert [m for m in NOT_AT_START if m in imported] == []


# A gateway with no `secrets` policy never imports the scrubber; with one, it imports it on a
# worker thread as it starts (no request needed), not on the event loop.
SCRUB_AT_START = textwrap.dedent(
    """
    import json, sys, threading, time
    from starlette.testclient import TestClient
    from gateway.app import create_app
    from gateway.config import parse_config
    import gateway.secrets.scanner as scanner_module

    threads = []
    real_import = scanner_module.importlib.import_module
    def watched(name, *args):
        if name.startswith("traffic.scrub"):
            threads.append(threading.current_thread().name)
        return real_import(name, *args)
    scanner_module.importlib.import_module = watched
    out = {}
    for policy in ("allow", "redact"):
        local = {"kind": "vllm", "model": "m", "replicas": ["http://127.0.0.1:9"]}
        config = {
            "backends": {"local": {**local, "secrets": policy}},
            "routing": {"default": "local"},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
        app = create_app(parse_config(config))
        with TestClient(app) as client:
            out[policy + "_ready"] = client.get("/ready").status_code
            scanner = app.state.switchyard.secrets
            deadline = time.monotonic() + 120
            while policy == "redact" and not scanner.loaded and time.monotonic() < deadline:
                time.sleep(0.05)
            out[policy] = "traffic.scrub.scrubber" in sys.modules
    out["threads"] = threads
    print(json.dumps(out))
    """
)


def test_the_scrubber_loads_at_start_off_the_loop_only_when_a_target_uses_it() -> None:
    out = _python_json(SCRUB_AT_START)
    assert out["allow_ready"] == out["redact_ready"] == 200
    assert out["allow"] is False and out["redact"] is True
    assert out["threads"] == ["scrub-import"]
