"""What the gateway adds to time to first byte at concurrency 1, interleaved with the direct path.

    python -m loadtests.bench.gateway.ttft '<TtftSpec as JSON>'   ->   one JSON line

Why interleaved: at concurrency 1 the added time is a fraction of a millisecond, and this 2-core
machine's background moves a system's p50 by more than that between two cells measured seconds
apart. So one process sends, in turn, one streamed request to each system of the rotation (the
direct simulator of each wire format first, then every gateway path of that format), round
after round, on one keep-alive connection per system; every system sees the same moments of the
machine, and each gateway request has a *partner*: the direct request of its wire format sent
just before it in the same round.

Per gateway system the figures are:

- ``p50_ms``, ``p99_ms``: its own time to the first body byte (the first SSE event);
- ``direct_p50_ms``, ``direct_p99_ms``: its partner's over the same rounds;
- ``added_p50_ms``, ``added_p99_ms``: percentiles of the per-round differences (gateway minus
  partner): what the issue's target reads ("gateway minus direct to the simulator,
  interleaved"). The p99 of differences, not the difference of the p99s: a slow round of the
  direct path does not lower the gateway's figure.

The answer is ``ttft_tokens`` tokens (30: the issue's stream) so the stream is short and the
first byte is most of the gateway's work before the upstream answers. A request that fails
(status, no end marker, an error event) drops its round's pair and is counted.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Final

import aiohttp

from loadtests.bench.gateway.loadgen import (
    WIRES,
    CellSpec,
    StreamWatch,
    percentile,
    request_body,
    request_headers,
)

DIRECT_SYSTEMS: Final = ("direct", "direct_anthropic")


@dataclass(frozen=True, slots=True)
class TtftSpec:
    """The rotation: each system's request (a stream at concurrency 1) and its partner."""

    cells: dict[str, CellSpec]  # system -> its request; direct systems included
    partner: dict[str, str]  # gateway system -> the direct system of its wire format
    rounds: int
    warmup_rounds: int


@dataclass(slots=True)
class _Samples:
    ttfb_ms: dict[str, list[float | None]] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    error_sample: dict[str, str] = field(default_factory=dict)


async def _first_byte_ms(
    session: aiohttp.ClientSession, spec: CellSpec, body: bytes, headers: dict[str, str]
) -> tuple[float | None, str | None]:
    """(ms to the first body byte, None) for a complete answer, else (None, why)."""
    watch = StreamWatch(WIRES[spec.wire])
    start = time.perf_counter()
    first: float | None = None
    try:
        async with session.post(spec.url, data=body, headers=headers) as resp:
            if resp.status != 200:
                return None, f"HTTP {resp.status}: {(await resp.read())[:200]!r}"
            async for chunk in resp.content.iter_any():
                if first is None:
                    first = time.perf_counter()
                watch.feed(chunk)
    except (aiohttp.ClientError, TimeoutError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    problem = watch.problem()
    if problem is not None or first is None:
        return None, problem or "empty stream"
    return (first - start) * 1000, None


async def run_rotation(spec: TtftSpec) -> _Samples:
    order: list[str] = [s for s in DIRECT_SYSTEMS if s in spec.cells]
    order += [s for s in spec.cells if s not in DIRECT_SYSTEMS]
    bodies = {s: request_body(c) for s, c in spec.cells.items()}
    headers = {s: request_headers(c) for s, c in spec.cells.items()}
    samples = _Samples({s: [] for s in order}, {s: 0 for s in order})
    timeout = aiohttp.ClientTimeout(total=60)
    sessions = {
        s: aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), timeout=timeout)
        for s in order
    }
    try:
        for round_no in range(spec.warmup_rounds + spec.rounds):
            for system in order:
                ms, problem = await _first_byte_ms(
                    sessions[system], spec.cells[system], bodies[system], headers[system]
                )
                if round_no < spec.warmup_rounds:
                    continue
                samples.ttfb_ms[system].append(ms)
                if problem is not None:
                    samples.errors[system] += 1
                    samples.error_sample.setdefault(system, problem)
    finally:
        for session in sessions.values():
            await session.close()
    return samples


def _pct(values: list[float], q: float) -> float | None:
    return round(percentile(sorted(values), q), 3) if values else None


def figures(spec: TtftSpec, samples: _Samples) -> dict[str, dict[str, Any]]:
    """Per gateway system: its and its partner's first-byte percentiles and the added ones
    (module docstring)."""
    out: dict[str, dict[str, Any]] = {}
    for system, partner in spec.partner.items():
        pairs = [
            (g, d)
            for g, d in zip(samples.ttfb_ms[system], samples.ttfb_ms[partner], strict=True)
            if g is not None and d is not None
        ]
        gateway = [g for g, _ in pairs]
        direct = [d for _, d in pairs]
        added = [g - d for g, d in pairs]
        out[system] = {
            "pairs": len(pairs),
            "errors": samples.errors[system],
            "error_sample": samples.error_sample.get(system),
            "p50_ms": _pct(gateway, 50),
            "p99_ms": _pct(gateway, 99),
            "direct_p50_ms": _pct(direct, 50),
            "direct_p99_ms": _pct(direct, 99),
            "added_p50_ms": _pct(added, 50),
            "added_p99_ms": _pct(added, 99),
        }
    return out


def measure(
    cells: dict[str, CellSpec],
    partner: dict[str, str],
    rounds: int,
    warmup_rounds: int,
    timeout_s: float,
    say: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    """Run the rotation in a fresh process (never in the orchestrator's interpreter) and return
    :func:`figures`; {} when it failed (said)."""
    spec = TtftSpec(cells, partner, rounds, warmup_rounds)
    argv = [sys.executable, "-m", "loadtests.bench.gateway.ttft", json.dumps(asdict(spec))]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        say(f"[red]added TTFT: the rotation ran past {timeout_s:.0f}s[/red]")
        return {}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        say(f"[red]added TTFT failed ({done.returncode})[/red]: {done.stderr[-1000:]}")
        return {}
    result: dict[str, dict[str, Any]] = json.loads(lines[-1])
    for system, row in result.items():
        say(
            f"  added TTFT c=1 {system:22} p50 {row['added_p50_ms']} ms  "
            f"p99 {row['added_p99_ms']} ms  ({row['pairs']} pairs, {row['errors']} errors)"
        )
    return result


def spec_from_json(data: dict[str, Any]) -> TtftSpec:
    cells = {name: CellSpec(**cell) for name, cell in data["cells"].items()}
    return replace(TtftSpec(**data), cells=cells)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m loadtests.bench.gateway.ttft '<TtftSpec JSON>'")
    spec = spec_from_json(json.loads(args[0]))
    try:
        import uvloop

        samples = uvloop.run(run_rotation(spec))
    except ImportError:
        samples = asyncio.run(run_rotation(spec))
    sys.stdout.write(json.dumps(figures(spec, samples)) + "\n")


if __name__ == "__main__":
    main()
