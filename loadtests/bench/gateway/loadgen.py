"""The load generator: one process per cell, so it never shares an interpreter with a server.

    python -m loadtests.bench.gateway.loadgen '<CellSpec as JSON>'   ->   one JSON line (CellResult)

How a cell is measured:

1. ``concurrency`` workers share one aiohttp session whose pool holds exactly ``concurrency``
   keep-alive connections; each worker sends its next request as soon as the last one ended.
2. Warm-up: ``warmup`` requests (connections opened, caches filled), not counted.
3. CPU snapshot of each watched process tree (``/proc/<pid>/stat`` utime+stime of the process
   and its descendants, through psutil), then the measured window: workers start requests until
   ``duration_s`` has passed (or ``max_requests`` were started), and the window ends when the
   last of them has finished. CPU snapshot again.
4. Latency is the time to the last byte of the body; for streams also the time to the first
   byte of the body (the first SSE event). An answer counts only when it is complete; anything
   else is an error, counted (with a sample of the first) and not timed: a status other than
   200; a unary body without ``"choices"`` (OpenAI) or ``"stop_reason"`` (Anthropic); a stream
   without its end marker (OpenAI ``[DONE]``, Anthropic ``message_stop``) or with an error
   event in it (``data: {"error"``, ``event: error``).

The request is what an SDK sends for that wire format and nothing more: OpenAI chat completions
(``model``, ``messages``, ``max_tokens``, ``stream``) or Anthropic Messages (``model``,
``max_tokens``, ``messages``, ``stream: true`` for streams; ``anthropic-version: 2023-06-01``,
the key as ``x-api-key`` from the orchestrator's headers). No simulator knob travels with it.

For streams, the SSE events of each complete answer are counted (blank-line separated blocks),
so the per-chunk cost is computed from what was received, not from what was asked.

The generator's own CPU per request is reported too, to show it stayed cheap (uvloop, no JSON
parsing of answers, bodies serialised once); and so is the CPU the rest of the machine used in
the window (all processes' user+system time, from ``/proc/stat``, less the watched trees and the
generator), as a share of all cores: on a shared machine, a cell where other processes took a
large share measured them too, and its throughput cannot be compared with its neighbours'.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Final, NamedTuple

import aiohttp
import orjson
import psutil

PROMPT = "In one short sentence: why do gateways batch their database writes?"
ANTHROPIC_VERSION: Final = "2023-06-01"
TAIL_BYTES: Final = 128  # holds the last event of either format's stream


@dataclass(frozen=True, slots=True)
class WireShape:
    """How one wire format's answers are told complete (see the module docstring, 4)."""

    unary_marker: bytes
    stream_end: bytes
    stream_error: bytes


WIRES: Final = {
    "openai": WireShape(b'"choices"', b"[DONE]", b'data: {"error"'),
    "anthropic": WireShape(b'"stop_reason"', b"message_stop", b"event: error"),
    # The Responses stream ends with response.completed (or .incomplete at max_output_tokens),
    # whose data is the whole response: its usage's last count is what the tail holds.
    "responses": WireShape(b'"output"', b'"total_tokens"', b"event: error"),
}


@dataclass(frozen=True, slots=True)
class CellSpec:
    url: str  # the chat completions or messages endpoint
    concurrency: int
    duration_s: float
    warmup: int
    max_requests: int
    stream: bool
    max_tokens: int
    model: str
    wire: str = "openai"  # a key of WIRES
    headers: dict[str, str] = field(default_factory=dict)
    watch_pids: dict[str, int] = field(default_factory=dict)  # role -> pid of a process tree
    prompt: str = PROMPT


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
    root_cpu_ms: dict[str, float]  # role -> CPU ms of the tree's root alone (no writer child)
    client_cpu_ms: float
    events_per_answer: float | None = None  # streams: mean SSE events of a complete answer
    other_cpu_percent: float | None = None  # CPU of other processes, % of all cores' time


@dataclass(slots=True)
class _Tally:
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    events: int = 0
    errors: int = 0
    error_sample: str | None = None
    started: int = 0

    def fail(self, reason: str) -> None:
        self.errors += 1
        if self.error_sample is None:
            self.error_sample = reason


class StreamWatch:
    """Counts SSE events and looks for the error marker across chunk boundaries; keeps the tail."""

    __slots__ = ("error", "events", "shape", "tail")

    def __init__(self, shape: WireShape) -> None:
        self.shape = shape
        self.tail = b""
        self.events = 0
        self.error = False

    def feed(self, chunk: bytes) -> None:
        # The tail's end joined to the chunk's start: a marker or "\n\n" cut in two still counts.
        seam = self.tail[-len(self.shape.stream_error) :] + chunk[: len(self.shape.stream_error)]
        self.events += chunk.count(b"\n\n") + int(self.tail[-1:] == b"\n" == chunk[:1])
        if self.shape.stream_error in chunk or self.shape.stream_error in seam:
            self.error = True
        self.tail = (self.tail + chunk)[-TAIL_BYTES:]

    def problem(self) -> str | None:
        if self.error:
            return "stream carried an error event"
        if self.shape.stream_end not in self.tail:
            return f"stream ended without {self.shape.stream_end.decode()}"
        return None


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


class CpuSeconds(NamedTuple):
    """User+system CPU seconds of a process tree, read at one instant."""

    tree: float  # the process and its live descendants
    process: float  # the process alone (a recording gateway without its writer child)


def tree_cpu_s(pid: int) -> CpuSeconds:
    """The CPU seconds of a live process and its live descendants (zero when it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return CpuSeconds(0.0, 0.0)
    total = alone = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
        if proc is root:
            alone = times.user + times.system
    return CpuSeconds(total, alone)


def machine_busy_s() -> float:
    """User+system CPU seconds of every process on the machine since boot (all cores)."""
    times = psutil.cpu_times()
    return float(times.user + times.nice + times.system)


def request_body(spec: CellSpec) -> bytes:
    """The JSON body an SDK sends for ``spec.wire`` (serialised once per cell)."""
    messages = [{"role": "user", "content": spec.prompt}]
    if spec.wire == "responses":  # the OpenAI SDK's responses.create(model, input, ...)
        body: dict[str, object] = {
            "model": spec.model,
            "input": spec.prompt,
            "max_output_tokens": spec.max_tokens,
        }
        if spec.stream:
            body["stream"] = True
        return orjson.dumps(body)
    if spec.wire == "anthropic":
        body = {
            "model": spec.model,
            "max_tokens": spec.max_tokens,
            "messages": messages,
        }
        if spec.stream:  # the Anthropic SDK sends `stream` only when it streams
            body["stream"] = True
        return orjson.dumps(body)
    return orjson.dumps(
        {
            "model": spec.model,
            "messages": messages,
            "max_tokens": spec.max_tokens,
            "stream": spec.stream,
        }
    )


def request_headers(spec: CellSpec) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if spec.wire == "anthropic":
        headers["anthropic-version"] = ANTHROPIC_VERSION
    return {**headers, **spec.headers}


async def _one(
    session: aiohttp.ClientSession, spec: CellSpec, body: bytes, tally: _Tally | None
) -> None:
    shape = WIRES[spec.wire]
    start = time.perf_counter()
    first: float | None = None
    watch = StreamWatch(shape)
    problem: str | None = None
    try:
        async with session.post(spec.url, data=body, headers=spec.headers) as resp:
            if resp.status != 200:
                text = (await resp.read())[:200].decode(errors="replace")
                problem = f"HTTP {resp.status}: {text}"
            elif spec.stream:
                async for chunk in resp.content.iter_any():
                    if first is None:
                        first = time.perf_counter()
                    watch.feed(chunk)
                problem = watch.problem()
            else:
                data = await resp.read()
                if shape.unary_marker not in data:
                    problem = f"answer without {shape.unary_marker.decode()}: {data[:200]!r}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    if tally is None:
        return
    if problem is not None:
        tally.fail(problem)
        return
    tally.latencies.append(time.perf_counter() - start)
    if first is not None:
        tally.ttfbs.append(first - start)
    tally.events += watch.events


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
    if spec.wire not in WIRES:
        raise ValueError(f"unknown wire {spec.wire!r}; known: {sorted(WIRES)}")
    body = request_body(spec)
    spec = CellSpec(**{**asdict(spec), "headers": request_headers(spec)})
    connector = aiohttp.TCPConnector(limit=spec.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=spec.duration_s + 60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        await _warmup(session, spec, body)
        tally = _Tally()
        cpu_before = {role: tree_cpu_s(pid) for role, pid in spec.watch_pids.items()}
        machine_before = machine_busy_s()
        client_before = time.process_time()
        start = time.perf_counter()
        deadline = start + spec.duration_s
        await asyncio.gather(
            *(_worker(session, spec, body, tally, deadline) for _ in range(spec.concurrency))
        )
        elapsed = time.perf_counter() - start
        client_cpu = time.process_time() - client_before
        machine = machine_busy_s() - machine_before
        cpu_after = {role: tree_cpu_s(pid) for role, pid in spec.watch_pids.items()}
    done = len(tally.latencies)
    ours = sum(cpu_after[r].tree - cpu_before[r].tree for r in cpu_before) + client_cpu
    capacity = elapsed * (psutil.cpu_count() or 1)
    other = max(machine - ours, 0.0) / capacity * 100 if capacity > 0 else None
    return CellResult(
        requests=done,
        errors=tally.errors,
        error_sample=tally.error_sample,
        elapsed_s=elapsed,
        rps=done / elapsed if elapsed > 0 else 0.0,
        latency_ms=summarize(tally.latencies),
        ttfb_ms=summarize(tally.ttfbs) if spec.stream else None,
        cpu_ms={role: (cpu_after[role].tree - cpu_before[role].tree) * 1000 for role in cpu_before},
        root_cpu_ms={
            role: (cpu_after[role].process - cpu_before[role].process) * 1000 for role in cpu_before
        },
        client_cpu_ms=client_cpu * 1000,
        events_per_answer=tally.events / done if spec.stream and done else None,
        other_cpu_percent=other,
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
        sys.exit("usage: python -m loadtests.bench.gateway.loadgen '<CellSpec JSON>'")
    spec = CellSpec(**json.loads(args[0]))
    try:
        import uvloop

        result = uvloop.run(run_cell(spec))
    except ImportError:
        result = asyncio.run(run_cell(spec))
    sys.stdout.write(json.dumps(asdict(result)) + "\n")


if __name__ == "__main__":
    main()
