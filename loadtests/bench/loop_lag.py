"""Event-loop lag under one maximal allowed request: how long ``/health`` waits meanwhile.

    python -m loadtests.bench.loop_lag [--out DIR]        (make bench-loop-lag)

Starts the frontier simulator (accepting bodies up to 72 MiB, so the largest request the
gateway allows reaches it) and a gateway process (SQLite store, default limits), then sends each
maximal request shape through each door, one at a time, while a probe thread asks ``/health``
every 10 ms on its own connection. A request's *lag* is the probe's slowest answer while that
request was in flight; the baseline is the probe's slowest answer over the same time with no
request in flight, measured in the same run. Target (issue "Hostile input"): under 100 ms.

Shapes, at the defaults of ``gateway.config.LimitsConfig``:
- ``messages``: ``max_messages`` - 1 turns filling the body to just under ``max_body_bytes``;
- ``tools``: ``max_tools`` tools whose schemas nest to ``max_tool_schema_depth`` - 2;
- ``string``: one user turn of ``max_string_chars`` - 1,024 characters (less where the door's
  body limit is smaller).
Doors: chat completions to the OpenAI-format frontier (litellm), the Responses door, the
Messages door to the Anthropic-format frontier, and chat completions to the local target (here
the simulator stands in for the vLLM replica: the gateway's pass-through path is what is timed).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from loadtests.bench.servers import ServerFleet, free_port
from loadtests.bench.sim_gateway import simulator_aliases, simulator_backends
from serving.names import LOCAL_MODEL_NAME

PROBE_EVERY_S = 0.01
TARGET_LAG_MS = 100.0
# The gateway's defaults (gateway.config.LimitsConfig): loadtests reaches the gateway over HTTP
# only, so they are restated here and checked against its 400s (a shape over a bound is refused).
OPENAI_DOOR_BODY_BYTES = 64 * 1024 * 1024  # limits.max_body_bytes.chat / .responses
MESSAGES_DOOR_BODY_BYTES = 32 * 1024 * 1024  # limits.max_body_bytes.messages
MAX_MESSAGES = 10_000
MAX_TOOLS = 512
MAX_TOOL_SCHEMA_DEPTH = 32
MAX_STRING_CHARS = 32 * 1024 * 1024
SIM_MAX_BODY = 72 * 1024 * 1024  # above every door's, so the largest request reaches it


def max_body_bytes(door: str) -> int:
    """The gateway's default body limit of ``door``."""
    return MESSAGES_DOOR_BODY_BYTES if door == "messages" else OPENAI_DOOR_BODY_BYTES


class Probe:
    """``GET /health`` every ``PROBE_EVERY_S`` on a thread; latencies with their start times."""

    def __init__(self, base: str) -> None:
        self._base = base
        self._stop = threading.Event()
        self.samples: list[tuple[float, float]] = []  # (started, seconds)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        with httpx.Client(base_url=self._base, timeout=60) as client:
            while not self._stop.is_set():
                t0 = time.perf_counter()
                client.get("/health")
                self.samples.append((t0, time.perf_counter() - t0))
                self._stop.wait(PROBE_EVERY_S)

    def worst(self, start: float, end: float) -> tuple[float, int]:
        """Slowest answer (ms) of probes that overlapped [start, end], and how many there were."""
        during = [d for t0, d in list(self.samples) if t0 < end and t0 + d > start]
        return (max(during) * 1000 if during else 0.0), len(during)


def _turns(n: int, chars: int, user: str = "user", assistant: str = "assistant") -> list[Any]:
    filler = ("def handler(event):\n    return process(event)\n" * (chars // 44 + 1))[:chars]
    return [{"role": (user, assistant)[i % 2], "content": f"{i} {filler}"} for i in range(n)]


def _schema(depth: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(depth // 2):
        node = {"type": "object", "properties": {"x": node}}
    return node


def shapes() -> dict[str, Callable[[str], tuple[str, dict[str, Any]]]]:
    """Shape name -> (door -> path and body)."""
    n = MAX_MESSAGES - 1  # odd: the last turn is the user's
    tool_depth = MAX_TOOL_SCHEMA_DEPTH - 4  # the tool's own wrapping takes up to 4 levels

    def messages(door: str) -> tuple[str, dict[str, Any]]:
        # As many characters per turn as keep the whole body just under max_body_bytes.
        limit = max_body_bytes(door)
        per_turn = limit // n
        while True:
            path, body = _body(door, _turns(n, per_turn), [])
            size = len(json.dumps(body))
            if size <= limit - 64 * 1024:
                return path, body
            per_turn -= max(1, (size - limit + 64 * 1024) // n + 1)

    def tools(door: str) -> tuple[str, dict[str, Any]]:
        return _body(
            door, _turns(1, 64), [(f"tool_{i}", _schema(tool_depth)) for i in range(MAX_TOOLS)]
        )

    def string(door: str) -> tuple[str, dict[str, Any]]:
        # The longest string allowed, shortened until the body (its escapes included) fits.
        limit = max_body_bytes(door) - 64 * 1024
        chars = min(MAX_STRING_CHARS, limit) - 1024
        while True:
            path, body = _body(door, _turns(1, chars), [])
            size = len(json.dumps(body))
            if size <= limit:
                return path, body
            chars -= size - limit + 1024

    return {"messages": messages, "tools": tools, "string": string}


def _body(door: str, turns: list[Any], tools: list[tuple[str, Any]]) -> tuple[str, dict[str, Any]]:
    if door == "messages":
        body: dict[str, Any] = {"model": "claude-haiku-4-5", "max_tokens": 16, "messages": turns}
        if tools:
            body["tools"] = [{"name": n, "input_schema": s} for n, s in tools]
        return "/v1/messages", body
    if door == "responses":
        body = {"model": "gpt-4o-mini", "max_output_tokens": 16, "input": turns}
        if tools:
            body["tools"] = [{"type": "function", "name": n, "parameters": s} for n, s in tools]
        return "/v1/responses", body
    model = LOCAL_MODEL_NAME if door == "chat-local" else "gpt-4o-mini"
    body = {"model": model, "max_tokens": 16, "messages": turns}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": n, "parameters": s}} for n, s in tools
        ]
    return "/v1/chat/completions", body


DOORS = ("chat-frontier", "responses", "messages", "chat-local")


def gateway_config(sim_url: str, port: int, work: Path) -> dict[str, Any]:
    return {
        "gateway": {"listen": {"port": port}},
        "backends": simulator_backends(sim_url),
        "routing": {"default": "frontier-openai", "aliases": simulator_aliases()},
        "store": {"url": f"sqlite:///{work / 'traffic.db'}", "spool_dir": str(work / "spool")},
        "auth": {"required": False},
    }


def measure(base: str) -> dict[str, Any]:
    results: list[dict[str, Any]] = []
    with httpx.Client(base_url=base, timeout=120) as client, Probe(base) as probe:
        time.sleep(1.0)
        idle_start = time.perf_counter()
        time.sleep(2.0)
        baseline_ms, _ = probe.worst(idle_start, time.perf_counter())
        for shape, build in shapes().items():
            for door in DOORS:
                path, body = build(door)
                raw = json.dumps(body).encode()
                t0 = time.perf_counter()
                r = client.post(path, content=raw, headers={"content-type": "application/json"})
                t1 = time.perf_counter()
                time.sleep(0.2)  # let the probe that was waiting finish
                lag_ms, probes = probe.worst(t0, t1)
                row = {
                    "shape": shape,
                    "door": door,
                    "status": r.status_code,
                    "body_bytes": len(raw),
                    "request_s": round(t1 - t0, 3),
                    "lag_ms": round(lag_ms, 1),
                    "probes_during": probes,
                }
                if r.status_code != 200:
                    row["error"] = r.text[:300]
                results.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    lags = [r["lag_ms"] for r in results]
    return {
        "baseline_idle_max_ms": round(baseline_ms, 1),
        "max_lag_ms": max(lags),
        "median_lag_ms": statistics.median(lags),
        "target_ms": TARGET_LAG_MS,
        "met": max(lags) < TARGET_LAG_MS and all(r["status"] == 200 for r in results),
        "all_answered_200": all(r["status"] == 200 for r in results),
        "results": results,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.loop_lag", description=__doc__)
    parser.add_argument("--out", type=Path, default=None, help="logs and store (a temp dir)")
    args = parser.parse_args(argv)
    work = args.out or Path(tempfile.mkdtemp(prefix="loop-lag-"))
    work.mkdir(parents=True, exist_ok=True)
    with ServerFleet(work / "logs") as fleet:
        sim_port, gw_port = free_port(), free_port()
        sim = fleet.spawn(
            "simulator",
            [
                sys.executable,
                "-m",
                "loadtests.frontier_sim",
                "--port",
                str(sim_port),
                "--openai-max-body-bytes",
                str(SIM_MAX_BODY),
                "--anthropic-max-body-bytes",
                str(SIM_MAX_BODY),
            ],
            sim_port,
            "/health",
        )
        fleet.wait_ready(sim, 60)
        cfg = work / "switchyard.yaml"
        cfg.write_text(yaml.safe_dump(gateway_config(sim.base_url, gw_port, work)))
        gw = fleet.spawn(
            "gateway",
            [sys.executable, "-m", "gateway", "--config", str(cfg)],
            gw_port,
            "/ready",
            env={"LITELLM_LOCAL_MODEL_COST_MAP": "True"},
        )
        fleet.wait_ready(gw, 120)
        summary = measure(gw.base_url)
    width = max(len(r["door"]) for r in summary["results"])
    for r in summary["results"]:
        print(
            f"{r['shape']:<9} {r['door']:<{width}} {r['status']} "
            f"{r['body_bytes'] / 1e6:5.2f} MB  request {r['request_s']:6.2f} s  "
            f"lag {r['lag_ms']:7.1f} ms"
        )
    verdict = "met" if summary["met"] else "MISSED"
    print(
        f"idle baseline max {summary['baseline_idle_max_ms']} ms; worst lag "
        f"{summary['max_lag_ms']} ms (target < {TARGET_LAG_MS:.0f} ms): {verdict}"
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
