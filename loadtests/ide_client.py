"""Simulated IDE client: sends task-family traffic through the gateway and reacts like a user.

For each task of ``sample_tasks(n, seed, split)`` (the fixed mix in ``loadtests/tasks/mix.py``):
1. ``POST /v1/chat/completions`` with the family's system prompt and the user message (file
   context + instruction, with the ``# task:`` marker the simulator's oracle reads unless
   ``task_marker`` is off), ``metadata = {"family", "task_id", "split"}`` (the gateway's tags),
   and ``x-switchyard-episode`` grouping ``episode_len`` consecutive tasks into one session;
2. verifies the reply with the family's verifier (in a worker thread: some run code);
3. ``POST /v1/feedback`` for the answer's ``x-request-id``: ``accepted`` when verified, else
   ``rejected`` with the verifier's feedback in ``payload.feedback``; for a seeded
   ``edit_share`` of rejections also ``edited`` with the reference answer in ``payload.text``,
   like a user who fixes the answer by hand.
At most ``concurrency`` tasks are in flight. Talks HTTP only (aiohttp); imports nothing of the
gateway. ``python -m loadtests.ide_client --base-url http://127.0.0.1:8000 --n 200 --seed 1``.
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
from typing import Any

import aiohttp

from loadtests.tasks import Task, sample_tasks, verify_reply
from loadtests.tasks.task import Split

EPISODE_HEADER = "x-switchyard-episode"
TARGET_HEADER = "x-switchyard-target"
COST_HEADERS = ("x-switchyard-cost-usd", "x-sim-cost-usd")


@dataclass(frozen=True, slots=True)
class IdeClientConfig:
    """One run of the simulated IDE. Each field is also a CLI flag (``--field-name``)."""

    base_url: str
    n: int = 200
    seed: int = 1
    split: Split = "train"
    model: str = "auto"
    api_key: str = ""
    concurrency: int = 4
    edit_share: float = 0.5
    episode_len: int = 8
    max_tokens: int = 512
    timeout_s: float = 120.0
    task_marker: bool = True
    send_feedback: bool = True

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n (the request budget) must be >= 0")
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if not 0 <= self.edit_share <= 1:
            raise ValueError("edit_share must be in [0, 1]")
        if self.episode_len < 1:
            raise ValueError("episode_len must be >= 1")
        if self.split not in ("train", "heldout"):
            raise ValueError("split must be 'train' or 'heldout'")


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


@dataclass(slots=True)
class RunStats:
    """Per-family outcomes of a run, and how feedback posting went."""

    families: dict[str, FamilyStats] = field(default_factory=dict)
    feedback_posted: int = 0
    feedback_failed: int = 0
    last_feedback_error: str | None = None
    wall_s: float = 0.0

    def family(self, name: str) -> FamilyStats:
        return self.families.setdefault(name, FamilyStats())

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
            "wall_s": self.wall_s,
        }


class _Run:
    def __init__(self, config: IdeClientConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.stats = RunStats()
        self.base = config.base_url.rstrip("/")
        self.headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}

    async def one(self, index: int, task: Task) -> None:
        cfg = self.config
        stats = self.stats.family(task.family)
        stats.sent += 1
        body = {
            "model": cfg.model,
            "messages": task.messages(marker=cfg.task_marker),
            "max_tokens": cfg.max_tokens,
            "temperature": 0,
            "metadata": task.metadata(),
        }
        episode = f"ide-{cfg.seed}-{cfg.split}-{index // cfg.episode_len}"
        headers = {**self.headers, EPISODE_HEADER: episode}
        started = time.perf_counter()
        try:
            async with self.session.post(
                f"{self.base}/v1/chat/completions", json=body, headers=headers
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
        inference_id = resp_headers.get("x-request-id")
        if not cfg.send_feedback or not inference_id:
            return
        meta = {"family": task.family, "task_id": task.task_id, "feedback": verdict.feedback}
        kind = "accepted" if verdict.passed else "rejected"
        await self.feedback({"inference_id": inference_id, "kind": kind, "payload": meta})
        edit_draw = random.Random(f"edit:{cfg.seed}:{cfg.split}:{index}").random()
        if not verdict.passed and edit_draw < cfg.edit_share:
            stats.edited += 1
            edit = {**meta, "text": task.reference_reply}
            await self.feedback({"inference_id": inference_id, "kind": "edited", "payload": edit})

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
            kind = type(f.default)
            choices = ("train", "heldout") if f.name == "split" else None
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
