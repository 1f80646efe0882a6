"""The flywheel's IDE traffic (``scripts/flywheel.py``): a round's tasks, the trickle that flows
through a swap, the client's own bookkeeping, and waiting for the record to settle."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from loadtests.ide_client import IdeClientConfig, RunStats, run_ide_client
from rl_loop.labels import Labels, save_labels
from traffic.store import InferenceFilter, StoreBackend

# Round r of run seed k draws its IDE traffic from TRAFFIC_SEED + r + k x SEED_STRIDE (seed 0:
# the issue-14 run's draw); scripts/paired_frontier.py replays the same requests.
SEED_STRIDE = 100_000
TRAFFIC_SEED = 100


@dataclass(frozen=True, slots=True)
class Pace:
    """How the simulated IDE sends: tasks per batch (the trickle's), at once, answer cap."""

    batch: int
    concurrency: int
    max_tokens: int


async def traffic(base: str, oracle: str, n: int, seed: int, pace: Pace) -> RunStats:
    config = IdeClientConfig(
        base_url=base,
        n=n,
        seed=seed,
        concurrency=pace.concurrency,
        max_tokens=pace.max_tokens,
        oracle_url=oracle,
    )
    return await run_ide_client(config)


async def trickle(base: str, oracle: str, stop: asyncio.Event, seed: int, pace: Pace) -> RunStats:
    """Light IDE traffic until ``stop``: the client's view of requests during a swap."""
    total = RunStats()
    k = 0
    while not stop.is_set():
        total.merge(await traffic(base, oracle, pace.batch, seed * 1000 + k, pace))
        k += 1
    return total


def keep_labels(labels: Labels, stats: RunStats, path: Path) -> None:
    """The client's own bookkeeping (request id -> task), joined to the record by the loop
    (``rl_loop.labels``) for its verifiers and reports; the gateway never saw it."""
    for request_id, sent in stats.sent.items():
        labels[request_id] = {"family": sent.family, "task_id": sent.task_id}
    save_labels(labels, path)


async def settle(
    store: StoreBackend, since: datetime, quiet_s: float = 2.0, expect: Collection[str] = ()
) -> None:
    """Wait until the records of ``expect`` (the request ids the client got answers for) have
    landed and then no new record (shadow answers finish after the client's) lands for a
    while. Reads only the round's window: the store answers ``since`` from the ids' time. Why
    ``expect``: the record writer runs at idle priority, and on a saturated machine its first
    batch can land later than two quiet checks (an empty window, a crashed round)."""
    last = -1
    deadline = time.monotonic() + 120
    window = InferenceFilter(since=since)
    wanted = set(expect)
    while time.monotonic() < deadline:
        count = 0
        found: set[str] = set()
        async for row in store.iter_inferences(window, with_shadows=True):
            count += 1 + len(row.shadows) + len(row.feedback)
            found.add(row.inference.id)
        if count == last and wanted <= found:
            return
        last = count
        await asyncio.sleep(quiet_s)
