"""The load generator: one process per cell, so it never shares an interpreter with a server.

    python -m loadtests.bench.loadgen '<CellSpec as JSON>'   ->   one JSON line (CellResult)

How a cell is measured:

1. ``concurrency`` workers share one aiohttp session whose pool holds exactly ``concurrency``
   keep-alive connections; each worker sends its next request as soon as the last one ended.
2. Warm-up: ``warmup`` requests (connections opened, caches filled), not counted.
3. CPU snapshot of each watched process tree (``/proc/<pid>/stat`` utime+stime of the process
   and its descendants, through psutil), then the measured window: workers start requests until
   ``duration_s`` has passed (or ``max_requests`` were started), and the window ends when the
   last of them has finished. CPU snapshot again.
4. Latency is the time to the last byte of the body; for streams also the time to the first
   byte of the body (the first SSE event). A response other than 200, or a stream without
   ``[DONE]``, is an error: counted, not timed.

The generator's own CPU per request is reported too, to show it stayed cheap (uvloop, no JSON
parsing of answers, bodies serialised once).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field

import aiohttp
import orjson
import psutil

PROMPT = "In one short sentence: why do gateways batch their database writes?"


@dataclass(frozen=True, slots=True)
class CellSpec:
    url: str  # the chat completions endpoint
    concurrency: int
    duration_s: float
    warmup: int
    max_requests: int
    stream: bool
    max_tokens: int
    model: str
    headers: dict[str, str] = field(default_factory=dict)
    watch_pids: dict[str, int] = field(default_factory=dict)  # role -> pid of a process tree


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float
    p90: float
    p99: float
    mean: float
    max: float


@dataclass(frozen=True, slots=True)
class CellResult:
    requests: int  # completed successfully in the window
    errors: int
    error_sample: str | None
    elapsed_s: float
    rps: float
    latency_ms: Percentiles | None
    ttfb_ms: Percentiles | None  # streams only
    cpu_ms: dict[str, float]  # role -> CPU ms of that process tree over the window
    client_cpu_ms: float


@dataclass(slots=True)
class _Tally:
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    errors: int = 0
    error_sample: str | None = None
    started: int = 0

    def fail(self, reason: str) -> None:
        self.errors += 1
        if self.error_sample is None:
            self.error_sample = reason


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks; ``ordered`` is sorted and not empty."""
    if len(ordered) == 1:
        return ordered[0]
    pos = q / 100 * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(values_s: list[float]) -> Percentiles | None:
    if not values_s:
        return None
    ms = sorted(v * 1000 for v in values_s)
    return Percentiles(
        p50=percentile(ms, 50),
        p90=percentile(ms, 90),
        p99=percentile(ms, 99),
        mean=sum(ms) / len(ms),
        max=ms[-1],
    )


def tree_cpu_s(pid: int) -> float:
    """User+system CPU seconds of a live process and its live descendants."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


async def _one(
    session: aiohttp.ClientSession, spec: CellSpec, body: bytes, tally: _Tally | None
) -> None:
    start = time.perf_counter()
    first: float | None = None
    tail = b""
    try:
        async with session.post(spec.url, data=body, headers=spec.headers) as resp:
            if resp.status != 200:
                text = (await resp.read())[:200].decode(errors="replace")
                if tally is not None:
                    tally.fail(f"HTTP {resp.status}: {text}")
                return
            if spec.stream:
                async for chunk in resp.content.iter_any():
                    if first is None:
                        first = time.perf_counter()
                    tail = (tail + chunk)[-64:]
                if b"[DONE]" not in tail:
                    if tally is not None:
                        tally.fail("stream ended without [DONE]")
                    return
            else:
                await resp.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        if tally is not None:
            tally.fail(f"{type(exc).__name__}: {exc}")
        return
    if tally is not None:
        tally.latencies.append(time.perf_counter() - start)
        if first is not None:
            tally.ttfbs.append(first - start)


async def _worker(
    session: aiohttp.ClientSession,
    spec: CellSpec,
    body: bytes,
    tally: _Tally,
    deadline: float,
) -> None:
    while time.perf_counter() < deadline and tally.started < spec.max_requests:
        tally.started += 1
        await _one(session, spec, body, tally)


async def _warmup(session: aiohttp.ClientSession, spec: CellSpec, body: bytes) -> None:
    remaining = spec.warmup

    async def loop() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await _one(session, spec, body, None)

    await asyncio.gather(*(loop() for _ in range(spec.concurrency)))


async def run_cell(spec: CellSpec) -> CellResult:
    body = orjson.dumps(
        {
            "model": spec.model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": spec.max_tokens,
            "stream": spec.stream,
        }
    )
    headers = {"content-type": "application/json", **spec.headers}
    spec = CellSpec(**{**asdict(spec), "headers": headers})
    connector = aiohttp.TCPConnector(limit=spec.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=spec.duration_s + 60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await _warmup(session, spec, body)
        tally = _Tally()
        cpu_before = {role: tree_cpu_s(pid) for role, pid in spec.watch_pids.items()}
        client_before = time.process_time()
        start = time.perf_counter()
        deadline = start + spec.duration_s
        await asyncio.gather(
            *(_worker(session, spec, body, tally, deadline) for _ in range(spec.concurrency))
        )
        elapsed = time.perf_counter() - start
        client_cpu = time.process_time() - client_before
        cpu_after = {role: tree_cpu_s(pid) for role, pid in spec.watch_pids.items()}
    done = len(tally.latencies)
    return CellResult(
        requests=done,
        errors=tally.errors,
        error_sample=tally.error_sample,
        elapsed_s=elapsed,
        rps=done / elapsed if elapsed > 0 else 0.0,
        latency_ms=summarize(tally.latencies),
        ttfb_ms=summarize(tally.ttfbs) if spec.stream else None,
        cpu_ms={role: (cpu_after[role] - cpu_before[role]) * 1000 for role in cpu_before},
        client_cpu_ms=client_cpu * 1000,
    )


def result_from_json(data: dict[str, object]) -> CellResult:
    """The inverse of ``asdict`` for :class:`CellResult` (the orchestrator's side)."""
    fields = dict(data)
    for name in ("latency_ms", "ttfb_ms"):
        value = fields[name]
        fields[name] = Percentiles(**value) if isinstance(value, dict) else None
    return CellResult(**fields)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.exit("usage: python -m loadtests.bench.loadgen '<CellSpec JSON>'")
    spec = CellSpec(**json.loads(args[0]))
    try:
        import uvloop

        result = uvloop.run(run_cell(spec))
    except ImportError:
        result = asyncio.run(run_cell(spec))
    sys.stdout.write(json.dumps(asdict(result)) + "\n")


if __name__ == "__main__":
    main()
