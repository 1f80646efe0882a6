"""What tracing costs the gateway: CPU per request with ``telemetry.traces`` off and on.

    python -m loadtests.bench.trace_cost            # 5 rounds of 4 s cells
    BENCH_QUICK=1 python -m loadtests.bench.trace_cost

Three gateways on the local path (a ``vllm`` backend pointed at the frontier simulator,
recording off, the bench-gateway ``switchyard`` config): traces off; ``otlp`` traces of every
request (``on``); and of a tenth of them (``sampled``, ``telemetry.sample_ratio: 0.1``), to a
sink in this process (it answers 200 to each export and keeps nothing). A traced request pays
for its spans, the W3C header it sends upstream, and the batch processor's thread encoding and
posting every span. Each round runs one cell (``loadtests.bench.gateway.loadgen``: a fresh load
process, the gateway's process tree's CPU over the window) per gateway and mode, unary and a
16-token stream at concurrency 4, the gateways' order rotating between rounds; the figures are
medians over rounds. The last line printed is one JSON object.
"""

from __future__ import annotations

import http.server
import json
import os
import statistics
import sys
import threading
from typing import Any, Final

import yaml

from loadtests.bench.gateway.cells import run_loadgen
from loadtests.bench.gateway.loadgen import CellSpec
from loadtests.bench.gateway.settings import MODEL_NAME
from loadtests.bench.gateway.systems import BASE_ENV, PROJECT_ROOT, gateway_config
from loadtests.bench.servers import ServerFleet, free_port

OUT_DIR: Final = PROJECT_ROOT / ".cache" / "bench" / "trace_cost"
CONCURRENCY: Final = 4
TOKENS: Final = 16
ROUNDS: Final = 5
QUICK_ROUNDS: Final = 3
DURATION_S: Final = 4.0
QUICK_DURATION_S: Final = 2.5
WARMUP: Final = 40
READY_TIMEOUT_S: Final = 120.0
SAMPLED_RATIO: Final = 0.1


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector that accepts every export and keeps nothing."""

    exports = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).exports += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def _spawn_gateway(
    fleet: ServerFleet, name: str, sim_url: str, telemetry: dict[str, Any] | None
) -> Any:
    config = gateway_config("switchyard", sim_url, {"enabled": False})
    if telemetry is not None:
        config["telemetry"] = telemetry
    path = OUT_DIR / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port()
    argv = [sys.executable, "-m", "gateway", "--config", str(path), "--port", str(port)]
    server = fleet.spawn(name, argv, port, "/ready", env=BASE_ENV, cwd=PROJECT_ROOT)
    fleet.wait_ready(server, READY_TIMEOUT_S)
    return server


def _cpu_ms(server: Any, stream: bool, duration_s: float) -> float:
    spec = CellSpec(
        url=server.base_url + "/v1/chat/completions",
        concurrency=CONCURRENCY,
        duration_s=duration_s,
        warmup=WARMUP,
        max_requests=200_000,
        stream=stream,
        max_tokens=TOKENS,
        model=MODEL_NAME,
        watch_pids={"server": server.pid},
    )
    result = run_loadgen(spec, duration_s + 60)
    if result.errors or not result.requests:
        raise RuntimeError(f"{server.name}: {result.errors} errors ({result.error_sample})")
    return result.cpu_ms["server"] / result.requests


def run(rounds: int, duration_s: float) -> dict[str, Any]:
    """The figures (module docstring)."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    otlp = {"traces": "otlp", "otlp_endpoint": f"http://127.0.0.1:{sink.server_address[1]}"}
    telemetry: dict[str, dict[str, Any] | None] = {
        "off": None,
        "on": otlp,
        "sampled": {**otlp, "sample_ratio": SAMPLED_RATIO},
    }
    samples: dict[str, dict[str, list[float]]] = {
        mode: {side: [] for side in telemetry} for mode in ("unary", "stream")
    }
    with ServerFleet(OUT_DIR / "logs") as fleet:
        port = free_port()
        argv = [sys.executable, "-m", "loadtests.frontier_sim", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--tokens-per-s", "0", "--ttft-ms", "0"]
        sim = fleet.spawn("simulator", argv, port, "/health", env=BASE_ENV, cwd=PROJECT_ROOT)
        fleet.wait_ready(sim, READY_TIMEOUT_S)
        gateways = {
            side: _spawn_gateway(fleet, f"traces-{side}", sim.base_url, config)
            for side, config in telemetry.items()
        }
        sides = list(gateways)
        for round_no in range(rounds):
            at = round_no % len(sides)
            for mode in samples:
                for side in sides[at:] + sides[:at]:
                    cpu = _cpu_ms(gateways[side], mode == "stream", duration_s)
                    samples[mode][side].append(cpu)
                    line = f"round {round_no} {mode:6} traces {side:7} {cpu:.3f} ms/req"
                    print(line, file=sys.stderr)
    sink.shutdown()
    figures: dict[str, Any] = {"concurrency": CONCURRENCY, "rounds": rounds}
    figures["sampled_ratio"], figures["exports"] = SAMPLED_RATIO, _Sink.exports
    for mode, by_side in samples.items():
        median = {side: statistics.median(values) for side, values in by_side.items()}
        figures[mode] = {
            **{f"cpu_ms_per_request_{side}": round(ms, 4) for side, ms in median.items()},
            "traces_cost_ms": round(median["on"] - median["off"], 4),
            "sampled_cost_ms": round(median["sampled"] - median["off"], 4),
            "samples": {k: [round(v, 4) for v in vs] for k, vs in by_side.items()},
        }
    return figures


def main() -> int:
    quick = os.environ.get("BENCH_QUICK") == "1"
    figures = run(QUICK_ROUNDS if quick else ROUNDS, QUICK_DURATION_S if quick else DURATION_S)
    (OUT_DIR / "report.json").write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
