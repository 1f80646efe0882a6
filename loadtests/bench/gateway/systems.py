"""The servers under test: their configs, their start-up one at a time, and what is read from
them outside the cells (idle CPU, memory after the load, rows recorded).

Start order: the simulator (everything else calls it), then each gateway server alone, then the
LiteLLM proxy. One at a time so that a server's time to ready (spawn -> first 200 from its ready
path, asked every ``settings.ready_poll_s``) is its own, not shared with another start-up on the
same cores: each waits until the servers already up are quiet (:func:`settle`; a gateway with a
frontier target imports litellm in the background for a few seconds after ``/ready``, which
slows the next gateway's start-up on a small machine). A gateway is started
``settings.ready_samples`` times (stopped in between; the last start serves the load) and its
time to ready is the median: one start on a shared machine can be a second off.

The simulator answers ``long_stream_tokens`` words unless ``max_tokens`` cuts them, unpaced
(``tokens_per_s`` 0, no time to first token): the answer's length is the request's
``max_tokens``, as with a real provider, and nothing but the model name and body differ between
the systems' requests.

Gateway configs (API keys off: they need the store, and the recording-off servers have none; the
load carries no key to any Switchyard system, LiteLLM checks its master key):

- ``switchyard``/``switchyard_rec``: one ``vllm`` backend, ``sim-local`` at the simulator;
- ``frontier``/``frontier_rec``: two ``litellm`` backends, ``openai/<model>`` at ``<sim>/v1`` and
  ``anthropic/<model>`` at ``<sim>`` (litellm appends ``/v1/messages`` to an Anthropic base that
  does not end with it), the key read from :data:`FRONTIER_KEY_ENV` (a dummy; the simulator
  checks none). No prices in the config: the cost comes from litellm's local price map, as in a
  deployment that does not override them;
- ``frontier_secrets_rec``: ``frontier_rec`` with ``secrets: redact`` on both targets.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import sqlite3
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import yaml

from loadtests.bench.gateway import litellm_proxy
from loadtests.bench.gateway.loadgen import tree_cpu_s
from loadtests.bench.gateway.settings import (
    FRONTIER_ANTHROPIC_MODEL,
    FRONTIER_OPENAI_MODEL,
    MODEL_NAME,
    SYSTEM_SPECS,
    BenchSettings,
    ServerName,
    SystemName,
)
from loadtests.bench.servers import (
    Memory,
    Server,
    ServerFleet,
    ServerStartError,
    free_port,
    process_memory,
)

PROJECT_ROOT: Final = Path(__file__).resolve().parents[3]
BASE_ENV: Final = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHONUNBUFFERED": "1"}
FRONTIER_KEY_ENV: Final = "BENCH_FRONTIER_API_KEY"
FRONTIER_DUMMY_KEY: Final = "sk-bench-frontier-dummy"
ANTHROPIC_CLIENT_KEY: Final = "sk-ant-bench-client"  # what an Anthropic SDK client always sends
IDLE_SAMPLE_S: Final = 1.0
QUIET_PERCENT: Final = 5.0  # a server below this share of a core is settled
SETTLE_MAX_S: Final = 30.0  # the longest wait for the servers to settle before the cells


@dataclasses.dataclass(slots=True)
class Systems:
    """The servers that started (by server name), and why the others did not."""

    simulator: Server
    servers: dict[ServerName, Server] = dataclasses.field(default_factory=dict)
    unavailable: dict[ServerName, str] = dataclasses.field(default_factory=dict)
    startup_s: dict[ServerName, float] = dataclasses.field(default_factory=dict)
    startup_samples_s: dict[ServerName, list[float]] = dataclasses.field(default_factory=dict)
    # How long each start waited for the servers already up to be quiet (:func:`settle`).
    startup_settle_s: dict[ServerName, float] = dataclasses.field(default_factory=dict)
    recording_dbs: dict[ServerName, Path] = dataclasses.field(default_factory=dict)

    def server_for(self, system: SystemName) -> Server | None:
        return self.servers.get(SYSTEM_SPECS[system].server)

    def why_not(self, system: SystemName) -> str:
        return self.unavailable.get(SYSTEM_SPECS[system].server, "not started")

    def headers(self, system: SystemName) -> dict[str, str]:
        """The client's credentials for ``system`` (the wire format's own headers are the load
        generator's)."""
        if system == "litellm":
            return litellm_proxy.auth_headers()
        if SYSTEM_SPECS[system].wire == "anthropic":
            return {"x-api-key": ANTHROPIC_CLIENT_KEY}
        return {}


def gateway_config(server: ServerName, sim_url: str, store: Mapping[str, Any]) -> dict[str, Any]:
    """The config of one gateway server (see the module docstring)."""
    backends: dict[str, Any]
    routing: dict[str, Any]
    if server in ("switchyard", "switchyard_rec"):
        backends = {"local": {"kind": "vllm", "model": MODEL_NAME, "replicas": [sim_url]}}
        routing = {"default": "local", "aliases": {MODEL_NAME: "local"}}
    else:
        frontier = {"kind": "litellm", "api_key_env": FRONTIER_KEY_ENV}
        backends = {
            "frontier-openai": {
                **frontier,
                "model": f"openai/{FRONTIER_OPENAI_MODEL}",
                "api_base": f"{sim_url}/v1",
            },
            "frontier-anthropic": {
                **frontier,
                "model": f"anthropic/{FRONTIER_ANTHROPIC_MODEL}",
                "api_base": sim_url,
            },
        }
        aliases = {
            FRONTIER_OPENAI_MODEL: "frontier-openai",
            FRONTIER_ANTHROPIC_MODEL: "frontier-anthropic",
        }
        routing = {"default": "frontier-openai", "aliases": aliases}
        if server == "frontier_secrets_rec":
            for target in backends.values():
                target["secrets"] = "redact"
    return {
        "backends": backends,
        "routing": routing,
        "store": dict(store),
        "auth": {"required": False},
    }


def _recording_store(out_dir: Path, server: ServerName) -> tuple[dict[str, Any], Path]:
    db = out_dir / f"recording-{server}.db"
    spool = out_dir / f"spool-{server}"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    shutil.rmtree(spool, ignore_errors=True)
    store = {"enabled": True, "url": f"sqlite:///{db.resolve()}", "spool_dir": str(spool)}
    return store, db


def _spawn_simulator(fleet: ServerFleet, settings: BenchSettings) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "loadtests.frontier_sim", "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--answer-tokens", str(settings.long_stream_tokens)]
    argv += ["--tokens-per-s", "0", "--ttft-ms", "0"]
    return fleet.spawn("simulator", argv, port, "/health", env=BASE_ENV, cwd=PROJECT_ROOT)


def _spawn_gateway(
    fleet: ServerFleet, server: ServerName, systems: Systems, out_dir: Path
) -> Server:
    store: dict[str, Any] = {"enabled": False}
    if server.endswith("_rec"):
        store, systems.recording_dbs[server] = _recording_store(out_dir, server)
    config_path = out_dir / f"{server}.yaml"
    config = gateway_config(server, systems.simulator.base_url, store)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    argv = [sys.executable, "-m", "gateway", "--config", str(config_path), "--port", str(port)]
    env = {**BASE_ENV, FRONTIER_KEY_ENV: FRONTIER_DUMMY_KEY}
    return fleet.spawn(server, argv, port, "/ready", env=env, cwd=PROJECT_ROOT)


def _spawn_proxy(fleet: ServerFleet, proxy_exe: Path, sim: Server, out_dir: Path) -> Server:
    cfg = litellm_proxy.write_config(out_dir / "litellm.yaml", sim.base_url)
    port = free_port()
    return fleet.spawn(
        "litellm",
        litellm_proxy.command(proxy_exe, cfg, port),
        port,
        litellm_proxy.READY_PATH,
        env={**BASE_ENV, **litellm_proxy.ENV},
        cwd=out_dir,
    )


def _start_timed(
    fleet: ServerFleet, spawn: Callable[[], Server], samples: int, settings: BenchSettings
) -> tuple[Server, list[float]]:
    """Start a server ``samples`` times, one after the other, each time to ready; all but the
    last start are stopped. ``ServerStartError`` if one does not start (it is stopped)."""
    times: list[float] = []
    for attempt in range(samples):
        server = spawn()
        try:
            times.append(
                fleet.wait_ready(server, settings.startup_timeout_s, poll_s=settings.ready_poll_s)
            )
        except ServerStartError:
            fleet.remove(server)
            raise
        if attempt < samples - 1:
            fleet.remove(server)
    return server, times


def start_systems(
    fleet: ServerFleet,
    settings: BenchSettings,
    out_dir: Path,
    proxy_exe: Path | None,
    say: Callable[[str], None],
) -> Systems:
    """Every server the chosen systems need, one at a time (see the module docstring)."""
    sim = _spawn_simulator(fleet, settings)
    systems = Systems(simulator=sim)
    systems.startup_s["simulator"] = fleet.wait_ready(
        sim, settings.startup_timeout_s, poll_s=settings.ready_poll_s
    )
    systems.servers["simulator"] = sim
    for name in settings.servers():
        if name == "simulator":
            continue
        spawn: Callable[[], Server]
        if name != "litellm":
            spawn = functools.partial(_spawn_gateway, fleet, name, systems, out_dir)
        elif proxy_exe is not None:
            spawn = functools.partial(_spawn_proxy, fleet, proxy_exe, sim, out_dir)
        else:
            systems.unavailable[name] = "LiteLLM proxy not installed (see the log above)"
            continue
        samples = 1 if name == "litellm" else settings.ready_samples  # the proxy takes ~10 s
        systems.startup_settle_s[name] = settle(systems.servers)[1]
        try:
            server, times = _start_timed(fleet, spawn, samples, settings)
        except ServerStartError as exc:
            say(f"[red]{name} did not start[/red]: {exc}")
            systems.unavailable[name] = str(exc).splitlines()[0]
            continue
        systems.startup_samples_s[name] = times
        systems.startup_s[name] = statistics.median(times)
        systems.servers[name] = server
        shown = ", ".join(f"{t:.2f}" for t in times)
        say(f"{name} ready in {shown} s (median {systems.startup_s[name]:.2f}), {server.base_url}")
    return systems


def idle_cpu_percent(servers: Mapping[ServerName, Server]) -> dict[str, float]:
    """CPU each server burns while nobody calls it, over :data:`IDLE_SAMPLE_S`."""
    before = {name: tree_cpu_s(s.pid).tree for name, s in servers.items()}
    time.sleep(IDLE_SAMPLE_S)
    return {
        name: round(100 * (tree_cpu_s(s.pid).tree - before[name]) / IDLE_SAMPLE_S, 2)
        for name, s in servers.items()
    }


def settle(servers: Mapping[ServerName, Server]) -> tuple[dict[str, float], float]:
    """Wait until every server is quiet (:data:`QUIET_PERCENT`), at most :data:`SETTLE_MAX_S`;
    returns the last sample's idle CPU per server and the seconds waited.

    Why: a gateway with a frontier target imports litellm in the background once ``/ready``
    answers (a few seconds of a core); it would take that CPU from the next server's start and
    from the first cells. A server still busy after the wait shows in the returned figures."""
    started = time.monotonic()
    while True:
        idle = idle_cpu_percent(servers)
        waited = time.monotonic() - started
        if all(v < QUIET_PERCENT for v in idle.values()) or waited >= SETTLE_MAX_S:
            return idle, round(waited, 1)


def server_memory(servers: Mapping[ServerName, Server]) -> dict[str, Memory]:
    """Each server process's resident memory now and its peak (the process, not its tree)."""
    out: dict[str, Memory] = {}
    for name, server in servers.items():
        found = process_memory(server.pid)
        if found is not None:
            out[name] = found
    return out


def recorded_rows(db: Path | None) -> int | None:
    """Rows in the ``inference`` table of a recording server's SQLite file (None: no file)."""
    if db is None or not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            (count,) = conn.execute("SELECT count(*) FROM inference").fetchone()
            return int(count)
    except sqlite3.Error:
        return 0
