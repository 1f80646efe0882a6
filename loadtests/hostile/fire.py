"""Fire a hostile corpus at a running gateway, watch it meanwhile, and judge what came back.

    with GatewayWatch(base_url) as watch:                # /health every 50 ms, /metrics every 0.5 s
        outcomes = await fire(base_url, cases, creds)    # bounded concurrency, 10 s per request
    findings = [f for o in outcomes for f in judge(o)]
    records = check_records(outcomes, stored)            # stored: (id, status) read from the store

:func:`judge` holds a gateway to the issue's targets, per answer: no 5xx (``5xx``), an answer
within the client deadline (``hang``; ``no_answer`` when the connection dropped), errors in the
door's own shape (``bad_shape``: Anthropic's for ``/v1/messages*``, OpenAI's elsewhere), a 4xx
for what must be refused (``accepted_bad_input``), a 2xx for valid traffic (``refused_valid``),
an ``x-request-id`` on every inference answer (``no_request_id``), and no error event inside a
200 stream (``stream_error``). Cases that close their connection mid-body are not judged by
answer; :func:`check_records` expects each of them to leave one record with status 499.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import httpx

from loadtests.hostile.case import (
    ANTHROPIC_DOORS,
    ID_MARKER,
    INFERENCE_DOORS,
    Expect,
    HostileCase,
    IdSlot,
)

FindingKind = Literal[
    "5xx",
    "hang",
    "no_answer",
    "bad_shape",
    "accepted_bad_input",
    "refused_valid",
    "no_request_id",
    "stream_error",
]
DEFAULT_CONCURRENCY: Final = 8
DEFAULT_TIMEOUT_S: Final = 10.0
KEPT_BYTES: Final = 1 << 20  # of each answer: whole errors and streams, for the checks
CLIENT_CLOSED: Final = 499
_BREAKER_RE: Final = re.compile(r'^switchyard_breaker_state\{target="([^"]*)"\} (\S+)$', re.M)
_STORE_RE: Final = re.compile(r"^switchyard_store_(\w+) (\S+)$", re.M)
_STREAM_ERRORS: Final = (b'data: {"error"', b"event: error", b"response.failed")


@dataclass(frozen=True, slots=True)
class Credentials:
    key: str
    other_key: str
    admin_token: str


@dataclass(slots=True)
class Outcome:
    """What one case got back (``status`` None: no answer; ``error`` says why)."""

    case: HostileCase
    expect: Expect  # the case's, or 4xx when a feedback id slot had no id to fill it
    status: int | None = None
    elapsed_s: float = 0.0
    request_id: str | None = None
    content_type: str = ""
    head: bytes = b""
    error: str | None = None
    sent_id: str | None = None
    sent_at: float = 0.0  # time.perf_counter() when sent


@dataclass(frozen=True, slots=True)
class Finding:
    kind: FindingKind
    outcome: Outcome
    detail: str


def _headers(case: HostileCase, creds: Credentials) -> dict[str, str]:
    headers = dict(case.headers)
    if case.content_type is not None:
        headers["content-type"] = case.content_type
    token = {
        "key": creds.key,
        "other_key": creds.other_key,
        "bad_key": "sy-" + "Z" * 43,
        "admin": creds.admin_token,
        "bad_admin": "not-the-admin-token",
    }.get(case.credential)
    if token is not None:
        if case.door in ANTHROPIC_DOORS and case.credential in ("key", "other_key"):
            headers["x-api-key"] = token
        else:
            headers["authorization"] = f"Bearer {token}"
    return headers


def _fill_id(case: HostileCase, ids: dict[IdSlot, list[str]]) -> tuple[bytes, str | None, Expect]:
    marker = ID_MARKER.encode()
    if case.id_slot is None or marker not in case.body:
        return case.body, None, case.expect
    pool = ids[case.id_slot]
    if pool:
        chosen = pool[case.index % len(pool)]
        return case.body.replace(marker, chosen.encode()), chosen, case.expect
    unknown = str(uuid.uuid4())  # no answer of that key yet: an unknown id must be refused
    return case.body.replace(marker, unknown.encode()), unknown, "4xx"


def _slot_of(out: Outcome) -> IdSlot | None:
    """Which feedback id pool an inference answer joins."""
    if out.case.door not in INFERENCE_DOORS or out.status is None:
        return None
    if out.case.credential == "other_key":
        return "other"
    if out.case.credential != "key":
        return None
    return "own" if out.status < 300 else "own_refused" if out.status == 400 else None


async def _close_mid_body(
    base_url: str, case: HostileCase, body: bytes, headers: dict[str, str], out: Outcome
) -> None:
    """Send the headers and half the body, then close the connection."""
    url = urlsplit(base_url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    _, writer = await asyncio.open_connection(host, port)
    lines = [
        f"{case.method} {case.path} HTTP/1.1",
        f"host: {host}:{port}",
        f"content-length: {len(body)}",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write("\r\n".join(lines).encode() + b"\r\n\r\n" + body[: len(body) // 2])
    await writer.drain()
    await asyncio.sleep(0.2)
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    out.error = "closed mid-body on purpose"


async def _send(
    client: httpx.AsyncClient,
    base_url: str,
    case: HostileCase,
    creds: Credentials,
    ids: dict[IdSlot, list[str]],
    timeout_s: float,
) -> Outcome:
    body, sent_id, expect = _fill_id(case, ids)
    started = time.perf_counter()
    out = Outcome(case, expect, sent_id=sent_id, sent_at=started)
    try:
        async with asyncio.timeout(timeout_s):
            if case.disconnect:
                await _close_mid_body(base_url, case, body, _headers(case, creds), out)
                return out
            resp = await client.request(
                case.method, case.path, content=body or None, headers=_headers(case, creds)
            )
    except TimeoutError:
        out.error = f"no answer within {timeout_s:.0f} s"
        return out
    except (httpx.HTTPError, OSError) as exc:
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    finally:
        out.elapsed_s = time.perf_counter() - started
    out.status = resp.status_code
    out.request_id = resp.headers.get("x-request-id")
    out.content_type = resp.headers.get("content-type", "")
    out.head = resp.content[:KEPT_BYTES]
    return out


async def fire(
    base_url: str,
    cases: Iterable[HostileCase],
    creds: Credentials,
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Outcome]:
    """Send every case, ``concurrency`` at a time, each with a ``timeout_s`` deadline.

    Feedback cases get the id of an earlier inference answer of the key they name. Cases are
    built lazily from ``cases`` (some are megabytes); outcomes come back in case order.
    """
    ids: dict[IdSlot, list[str]] = {"own": [], "own_refused": [], "other": []}
    outcomes: list[Outcome] = []
    queue = iter(cases)
    # A connection per request: uvicorn closes a connection after an unhandled exception, and
    # the next request sent on it would fail for a cause that is not its own.
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout_s + 5) as client:

        async def worker() -> None:
            for case in queue:
                out = await _send(client, base_url, case, creds, ids, timeout_s)
                outcomes.append(out)
                slot = _slot_of(out)
                if slot is not None and out.request_id:
                    ids[slot].append(out.request_id)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return sorted(outcomes, key=lambda o: o.case.index)


def shape_problem(door: str, body: bytes) -> str | None:
    """What is wrong with an error body for ``door``, or None when it has the door's shape."""
    try:
        obj = json.loads(body)
    except ValueError:
        return "error body is not JSON"
    if not isinstance(obj, dict) or not isinstance(obj.get("error"), dict):
        return "no `error` object"
    err = obj["error"]
    if door in ANTHROPIC_DOORS:
        if obj.get("type") != "error":
            return 'Anthropic error without `"type": "error"`'
        if not isinstance(err.get("type"), str) or not isinstance(err.get("message"), str):
            return "Anthropic error without string `error.type` and `error.message`"
        return None
    missing = [k for k in ("message", "type", "param", "code") if k not in err]
    if missing:
        return f"OpenAI error without {missing}"
    if not isinstance(err["message"], str) or not isinstance(err["type"], str):
        return "OpenAI error with non-string `message` or `type`"
    return None


def _throttled_admin(o: Outcome) -> bool:
    """A valid admin request refused because its address gave wrong admin tokens (the corpus's
    bad-token cases come from the same address): the gateway's login throttle, by design."""
    return o.case.door == "admin" and o.status == 429 and b"admin_login_throttled" in o.head


def judge(o: Outcome, timeout_s: float = DEFAULT_TIMEOUT_S) -> list[Finding]:
    """Every way this outcome misses the targets (module docstring); empty when it meets them."""
    case, status = o.case, o.status
    if case.disconnect:
        return []
    if status is None:
        kind: FindingKind = "hang" if o.error and o.error.startswith("no answer") else "no_answer"
        return [Finding(kind, o, o.error or "")]
    found: list[Finding] = []
    if o.elapsed_s > timeout_s:
        found.append(Finding("hang", o, f"answered after {o.elapsed_s:.1f} s"))
    if status >= 500:
        found.append(Finding("5xx", o, o.head[:300].decode(errors="replace")))
    elif o.expect == "4xx" and status < 400:
        found.append(Finding("accepted_bad_input", o, f"{status}, expected a 4xx"))
    elif o.expect == "2xx" and status >= 300 and not _throttled_admin(o):
        found.append(Finding("refused_valid", o, o.head[:300].decode(errors="replace")))
    if status >= 400:
        problem = shape_problem(case.door, o.head)
        if problem:
            found.append(Finding("bad_shape", o, problem))
    if case.door in INFERENCE_DOORS and not o.request_id:
        found.append(Finding("no_request_id", o, f"{status} without x-request-id"))
    streamed = status == 200 and "event-stream" in o.content_type
    if streamed and any(marker in o.head for marker in _STREAM_ERRORS):
        found.append(Finding("stream_error", o, "error event in a 200 stream"))
    return found


def repro(o: Outcome, limit: int = 300) -> dict[str, Any]:
    """A request to reproduce an outcome by hand: door, method, path, headers, body head."""
    case = o.case
    headers = {k: (v if len(v) < 80 else v[:60] + f"...({len(v)} chars)") for k, v in case.headers}
    if case.content_type is not None:
        headers["content-type"] = case.content_type
    body = case.body if o.sent_id is None else case.body.replace(ID_MARKER.encode(), b"<id>")
    return {
        "index": case.index,
        "door": case.door,
        "family": case.family,
        "request": f"{case.method} {case.path}",
        "credential": case.credential + (f" (id: {case.id_slot} answer)" if case.id_slot else ""),
        "headers": headers,
        "body_bytes": len(case.body),
        "body_head": body[:limit].decode("utf-8", errors="backslashreplace"),
        "status": o.status,
        "error": o.error,
        "elapsed_s": round(o.elapsed_s, 3),
        "answer_head": o.head[:limit].decode(errors="replace"),
    }


def status_histogram(outcomes: Sequence[Outcome]) -> dict[str, dict[str, int]]:
    hist: dict[str, Counter[str]] = {}
    for o in outcomes:
        label = (
            str(o.status) if o.status is not None else ("closed" if o.case.disconnect else "none")
        )
        hist.setdefault(o.case.door, Counter())[label] += 1
    return {door: dict(sorted(c.items())) for door, c in sorted(hist.items())}


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """Answered inference requests against the store's inference rows."""

    answered: int
    with_one_record: int
    missing: tuple[str, ...]  # answered ids with no record
    duplicated: tuple[str, ...]  # answered ids with more than one
    orphans: dict[str, int]  # stored ids no answer carried -> their status
    disconnects: int  # cases that closed mid-body (each should leave one 499 record)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.duplicated

    def summary(self) -> dict[str, Any]:
        return {
            "answered": self.answered,
            "with_one_record": self.with_one_record,
            "missing": len(self.missing),
            "duplicated": len(self.duplicated),
            "orphans": len(self.orphans),
            "orphan_statuses": dict(Counter(str(s) for s in self.orphans.values())),
            "disconnects_sent": self.disconnects,
        }


def check_records(outcomes: Sequence[Outcome], stored: Iterable[tuple[str, int]]) -> RecordCheck:
    counts: Counter[str] = Counter()
    status_of: dict[str, int] = {}
    for rid, status in stored:
        counts[rid.lower()] += 1
        status_of[rid.lower()] = status
    answered = {
        o.request_id.lower()
        for o in outcomes
        if o.request_id and o.status is not None and o.case.door in INFERENCE_DOORS
    }
    orphans = {rid: status_of[rid] for rid in counts if rid not in answered}
    return RecordCheck(
        answered=len(answered),
        with_one_record=sum(1 for rid in answered if counts[rid] == 1),
        missing=tuple(sorted(rid for rid in answered if counts[rid] == 0)),
        duplicated=tuple(sorted(rid for rid in answered if counts[rid] > 1)),
        orphans=orphans,
        disconnects=sum(1 for o in outcomes if o.case.disconnect),
    )


def breaker_states(metrics_text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in _BREAKER_RE.finditer(metrics_text)}


def store_stats(metrics_text: str) -> dict[str, float]:
    return {m[1]: float(m[2]) for m in _STORE_RE.finditer(metrics_text)}


@dataclass(slots=True)
class GatewayWatch:
    """While a run goes on: ``GET /health`` every ``interval_s`` (event-loop lag shows as its
    latency) and ``/metrics`` every ``metrics_every`` probes (highest breaker state seen), on a
    thread of its own so the load generator's work does not count as the gateway's lag."""

    base_url: str
    interval_s: float = 0.05
    metrics_every: int = 10
    samples: list[tuple[float, float]] = field(default_factory=list)  # (sent at, latency s)
    failures: int = 0
    breaker_max: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        with httpx.Client(base_url=self.base_url, timeout=30.0) as client:
            tick = 0
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    client.get("/health").raise_for_status()
                    self.samples.append((started, time.perf_counter() - started))
                except httpx.HTTPError:
                    self.failures += 1
                if tick % self.metrics_every == 0:
                    self.scrape(client)
                tick += 1
                self._stop.wait(self.interval_s)
            self.scrape(client)

    def scrape(self, client: httpx.Client) -> None:
        with contextlib.suppress(httpx.HTTPError):
            for target, state in breaker_states(client.get("/metrics").text).items():
                self.breaker_max[target] = max(state, self.breaker_max.get(target, 0.0))

    def __enter__(self) -> GatewayWatch:
        self._thread = threading.Thread(target=self._run, name="gateway-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    @property
    def breaker_opened(self) -> bool:
        return any(state > 0 for state in self.breaker_max.values())

    def lag(self) -> dict[str, float]:
        """/health latency in ms: max and p99 over the run, and the probe count."""
        if not self.samples:
            return {"probes": 0, "failures": self.failures, "max_ms": 0.0, "p99_ms": 0.0}
        ordered = sorted(latency for _, latency in self.samples)
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        return {
            "probes": len(ordered),
            "failures": self.failures,
            "max_ms": round(ordered[-1] * 1000, 1),
            "p99_ms": round(p99 * 1000, 1),
        }

    def stalls(self, outcomes: Sequence[Outcome], threshold_s: float = 1.0) -> list[dict[str, Any]]:
        """Each /health probe slower than ``threshold_s``, with the requests in flight then."""
        found = []
        for sent, latency in self.samples:
            if latency < threshold_s:
                continue
            busy = [
                o
                for o in outcomes
                if o.sent_at <= sent + latency and sent <= o.sent_at + o.elapsed_s
            ]
            found.append({
                "health_ms": round(latency * 1000),
                "in_flight": [f"#{o.case.index} {o.case.door} {o.case.family}" for o in busy],
            })  # fmt: skip
        return found
