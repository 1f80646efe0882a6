"""Simulated IDE client: sends task-family traffic through the gateway and reacts like a user.

It sends what a real client sends and nothing more: the gateway never learns which task family
or task a request is. For each task of ``sample_tasks(n, seed, split)`` (the fixed mix in
``tasks/ide/mix.py``):
1. with ``oracle_url`` set, registers the task with the frontier simulator directly,
   ``POST {oracle_url}/sim/oracle`` with ``{"prompt_hash", "task_id"}`` (the oracle channel the
   gateway never sees; ``loadtests/frontier_sim/oracle.py``);
2. ``POST /v1/chat/completions`` with the client type's one system prompt (``client``:
   ``ide_chat``, or ``agent``, which also sends its fixed tool list), the user message (file,
   code, instruction), ``max_tokens`` and ``temperature``: no ``metadata``, no tags, no task id
   and no session header;
3. verifies the reply with the family's verifier (in a worker thread: some run code) and keeps
   its own bookkeeping keyed by the response's ``x-request-id`` (:attr:`RunStats.sent`), so a
   flywheel or a benchmark joins a recorded request to its family without the gateway knowing;
4. ``POST /v1/feedback`` for that id, as an IDE plugin would: ``accepted``, or ``rejected`` with
   a short ``payload.reason`` (the verifier's feedback, what the user would say); for a seeded
   ``edit_share`` of rejections also ``edited`` with the fixed answer in ``payload.text``.
At most ``concurrency`` tasks are in flight. Talks HTTP only (aiohttp); imports nothing of the
gateway. ``python -m loadtests.ide_client --base-url http://127.0.0.1:8000 --oracle-url
http://127.0.0.1:8901 --n 200 --seed 1``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import aiohttp

from tasks.ide import CLIENT_TYPES, Task, Verdict, sample_tasks, verify_reply
from tasks.ide.clients import ClientType, client_profile, prompt_hash
from tasks.ide.task import Split

TARGET_HEADER = "x-switchyard-target"
REQUEST_ID_HEADER = "x-request-id"
COST_HEADERS = ("x-switchyard-cost-usd", "x-sim-cost-usd")
REASON_CHARS = 200


@dataclass(frozen=True, slots=True)
class IdeClientConfig:
    """One run of the simulated IDE. Each field is also a CLI flag (``--field-name``).

    ``client`` is the real client imitated (``ide_chat`` or ``agent``: its one system prompt and
    tool list, ``tasks/ide/clients.py``); ``oracle_url`` is the frontier simulator each
    task is registered with before it is sent (None: no registration, so the simulator gives its
    default answers).
    """

    base_url: str
    n: int = 200
    seed: int = 1
    split: Split = "train"
    client: ClientType = "ide_chat"
    oracle_url: str | None = None
    model: str = "auto"
    api_key: str = ""
    concurrency: int = 4
    edit_share: float = 0.5
    max_tokens: int = 512
    timeout_s: float = 120.0
    send_feedback: bool = True

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n (the request budget) must be >= 0")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if not 0 <= self.edit_share <= 1:
            raise ValueError("edit_share must be in [0, 1]")
        if self.split not in ("train", "heldout"):
            raise ValueError("split must be 'train' or 'heldout'")
        client_profile(self.client)  # raises ValueError naming the known client types


@dataclass(slots=True)
class FamilyStats:
    """Outcomes of one family's requests."""

    sent: int = 0
    accepted: int = 0
    rejected: int = 0
    edited: int = 0
    errors: int = 0
    targets: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None

    @property
    def accept_rate(self) -> float | None:
        judged = self.accepted + self.rejected
        return self.accepted / judged if judged else None

    @property
    def latency_p50_ms(self) -> float | None:
        return statistics.median(self.latencies_ms) if self.latencies_ms else None

    def merge(self, other: FamilyStats) -> None:
        self.sent += other.sent
        self.accepted += other.accepted
        self.rejected += other.rejected
        self.edited += other.edited
        self.errors += other.errors
        self.targets.update(other.targets)
        self.latencies_ms.extend(other.latencies_ms)
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent": self.sent,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "edited": self.edited,
            "errors": self.errors,
            "accept_rate": self.accept_rate,
            "targets": dict(self.targets),
            "latency_p50_ms": self.latency_p50_ms,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
        }


class SentTask(NamedTuple):
    """The client's own record of one answered request; the gateway never sees it."""

    family: str
    task_id: str
    verdict: Verdict
    edited: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "task_id": self.task_id,
            "passed": self.verdict.passed,
            "feedback": self.verdict.feedback,
            "edited": self.edited,
        }


@dataclass(slots=True)
class RunStats:
    """Per-family outcomes of a run, the client's bookkeeping, and how its side posts went.

    ``sent`` maps each answered request's ``x-request-id`` (the gateway's record id) to the task
    the client sent, so the record joins to its family on the client's side only.
    """

    families: dict[str, FamilyStats] = field(default_factory=dict)
    sent: dict[str, SentTask] = field(default_factory=dict)
    feedback_posted: int = 0
    feedback_failed: int = 0
    last_feedback_error: str | None = None
    oracle_registered: int = 0
    oracle_failed: int = 0
    last_oracle_error: str | None = None
    wall_s: float = 0.0

    def family(self, name: str) -> FamilyStats:
        return self.families.setdefault(name, FamilyStats())

    def merge(self, other: RunStats) -> None:
        """Add ``other``'s outcomes and bookkeeping (wall time adds up too)."""
        for name, stats in other.families.items():
            self.family(name).merge(stats)
        self.sent.update(other.sent)
        self.feedback_posted += other.feedback_posted
        self.feedback_failed += other.feedback_failed
        self.last_feedback_error = other.last_feedback_error or self.last_feedback_error
        self.oracle_registered += other.oracle_registered
        self.oracle_failed += other.oracle_failed
        self.last_oracle_error = other.last_oracle_error or self.last_oracle_error
        self.wall_s += other.wall_s

    def total(self) -> FamilyStats:
        out = FamilyStats()
        for stats in self.families.values():
            out.merge(stats)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "families": {name: s.as_dict() for name, s in sorted(self.families.items())},
            "total": self.total().as_dict(),
            "feedback_posted": self.feedback_posted,
            "feedback_failed": self.feedback_failed,
            "last_feedback_error": self.last_feedback_error,
            "oracle_registered": self.oracle_registered,
            "oracle_failed": self.oracle_failed,
            "last_oracle_error": self.last_oracle_error,
            "wall_s": self.wall_s,
            "sent": {rid: task.as_dict() for rid, task in self.sent.items()},
        }


class _Run:
    def __init__(self, config: IdeClientConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.stats = RunStats()
        self.base = config.base_url.rstrip("/")
        self.headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self.profile = client_profile(config.client)

    def body(self, task: Task) -> dict[str, Any]:
        """The request body: what a real client of this type sends, nothing about the task."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": task.messages(self.config.client),
            "max_tokens": self.config.max_tokens,
            "temperature": 0,
        }
        if self.profile.tools:
            body["tools"] = [dict(tool) for tool in self.profile.tools]
        return body

    async def one(self, index: int, task: Task) -> None:
        cfg = self.config
        stats = self.stats.family(task.family)
        stats.sent += 1
        body = self.body(task)
        await self.register(task, body["messages"][-1]["content"])
        started = time.perf_counter()
        try:
            async with self.session.post(
                f"{self.base}/v1/chat/completions", json=body, headers=self.headers
            ) as resp:
                payload = await resp.json(content_type=None)
                status, resp_headers = resp.status, resp.headers
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError):
            stats.errors += 1
            return
        stats.latencies_ms.append((time.perf_counter() - started) * 1000)
        if status != 200 or not isinstance(payload, dict) or not payload.get("choices"):
            stats.errors += 1
            return
        stats.targets[resp_headers.get(TARGET_HEADER, "unknown")] += 1
        usage = payload.get("usage") or {}
        stats.prompt_tokens += int(usage.get("prompt_tokens") or 0)
        stats.completion_tokens += int(usage.get("completion_tokens") or 0)
        cost = next((resp_headers[h] for h in COST_HEADERS if h in resp_headers), None)
        if cost is not None:
            stats.cost_usd = (stats.cost_usd or 0.0) + float(cost)
        reply = (payload["choices"][0].get("message") or {}).get("content") or ""
        verdict = await asyncio.to_thread(verify_reply, task, reply)
        if verdict.passed:
            stats.accepted += 1
        else:
            stats.rejected += 1
        edit_draw = random.Random(f"edit:{cfg.seed}:{cfg.split}:{index}").random()
        edited = not verdict.passed and edit_draw < cfg.edit_share
        stats.edited += edited
        request_id = resp_headers.get(REQUEST_ID_HEADER)
        if not request_id:
            return
        self.stats.sent[request_id] = SentTask(task.family, task.task_id, verdict, edited)
        if not cfg.send_feedback:
            return
        if verdict.passed:
            await self.feedback({"inference_id": request_id, "kind": "accepted"})
            return
        reason = {"reason": verdict.feedback[:REASON_CHARS]}
        await self.feedback({"inference_id": request_id, "kind": "rejected", "payload": reason})
        if edited:
            edit = {"text": task.reference_reply}
            await self.feedback({"inference_id": request_id, "kind": "edited", "payload": edit})

    async def register(self, task: Task, user_text: str) -> None:
        """Tell the simulator's oracle which task ``user_text`` is (never through the gateway)."""
        if self.config.oracle_url is None:
            return
        url = f"{self.config.oracle_url.rstrip('/')}/sim/oracle"
        entry = {"prompt_hash": prompt_hash(user_text), "task_id": task.task_id}
        try:
            async with self.session.post(url, json=entry) as resp:
                if resp.status == 200:
                    self.stats.oracle_registered += 1
                    return
                self.stats.last_oracle_error = f"{resp.status}: {(await resp.text())[:200]}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.stats.last_oracle_error = repr(exc)
        self.stats.oracle_failed += 1

    async def feedback(self, body: dict[str, Any]) -> None:
        try:
            async with self.session.post(
                f"{self.base}/v1/feedback", json=body, headers=self.headers
            ) as resp:
                if resp.status == 200:
                    self.stats.feedback_posted += 1
                    return
                self.stats.last_feedback_error = f"{resp.status}: {(await resp.text())[:200]}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.stats.last_feedback_error = repr(exc)
        self.stats.feedback_failed += 1


async def run_ide_client(
    config: IdeClientConfig,
    tasks: Sequence[Task] | None = None,
    session: aiohttp.ClientSession | None = None,
) -> RunStats:
    """Send ``tasks`` (default: ``sample_tasks(config.n, config.seed, config.split)``)."""
    if tasks is None:
        tasks = await asyncio.to_thread(sample_tasks, config.n, config.seed, config.split)
    own = session is None
    client = session or aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=config.timeout_s))
    run = _Run(config, client)
    limit = asyncio.Semaphore(config.concurrency)

    async def bounded(index: int, task: Task) -> None:
        async with limit:
            await run.one(index, task)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(bounded(i, t) for i, t in enumerate(tasks)))
    finally:
        if own:
            await client.close()
    run.stats.wall_s = time.perf_counter() - started
    return run.stats


CHOICES: dict[str, tuple[str, ...]] = {"split": ("train", "heldout"), "client": CLIENT_TYPES}


def build_parser() -> argparse.ArgumentParser:
    """One flag per :class:`IdeClientConfig` field; defaults come from the dataclass."""
    parser = argparse.ArgumentParser(prog="python -m loadtests.ide_client", description=__doc__)
    for f in dataclasses.fields(IdeClientConfig):
        flag = "--" + f.name.replace("_", "-")
        if f.default is dataclasses.MISSING:
            parser.add_argument(flag, dest=f.name, required=True)
        elif isinstance(f.default, bool):
            parser.add_argument(
                flag, dest=f.name, default=f.default, action=argparse.BooleanOptionalAction
            )
        else:
            kind = str if f.default is None else type(f.default)
            choices = CHOICES.get(f.name)
            parser.add_argument(flag, dest=f.name, type=kind, default=f.default, choices=choices)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    config = IdeClientConfig(**vars(args))
    stats = asyncio.run(run_ide_client(config))
    json.dump(stats.as_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
