"""The periodic jobs one gateway process of a fleet runs on a lease (``LeasedLoop``): the job
runs at once and then every interval while this process leads, asks for a lease that outlives
two missed rounds, waits while it is not ready, and survives the errors it is told to retry."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gateway.background import LeasedLoop
from gateway.fleet.base import LocalFleet


async def _until(check: object, rounds: int = 200) -> None:
    for _ in range(rounds):
        if callable(check) and check():
            return
        await asyncio.sleep(0.01)


async def test_the_job_runs_at_once_then_every_interval_while_it_leads() -> None:
    ran: list[int] = []
    asked: list[float] = []
    fleet = LocalFleet()

    async def lead(lease_s: float) -> bool:
        asked.append(lease_s)
        return await fleet.lead("job", lease_s)

    async def work() -> None:
        ran.append(len(ran))

    loop = LeasedLoop("job", (OSError,))
    loop.start(work, lambda: 0.02, lead)
    try:
        await _until(lambda: len(ran) >= 3)
    finally:
        await loop.aclose()
    assert len(ran) >= 3 and set(asked) == {0.06}


async def test_a_follower_or_an_unready_process_does_not_run_it() -> None:
    ran: list[str] = []
    asked: dict[str, int] = {"follower": 0, "unready": 0}

    def lead(who: str) -> Callable[[float], Awaitable[bool]]:
        async def ask(lease_s: float) -> bool:
            asked[who] += 1
            return who == "unready"  # it would lead, were it ready

        return ask

    async def work() -> None:
        ran.append("x")

    follower = LeasedLoop("job", (OSError,))
    follower.start(work, lambda: 0.01, lead("follower"))
    unready = LeasedLoop("job", (OSError,))
    unready.start(work, lambda: 0.01, lead("unready"), ready=lambda: False)
    await asyncio.sleep(0.1)
    await follower.aclose()
    await unready.aclose()
    assert ran == [] and asked["follower"] > 0 and asked["unready"] == 0


async def test_an_error_it_retries_does_not_end_the_loop() -> None:
    tries: list[int] = []

    async def lead(lease_s: float) -> bool:
        return True

    async def work() -> None:
        tries.append(1)
        if len(tries) < 3:
            raise OSError("disk full")

    loop = LeasedLoop("job", (OSError,))
    loop.start(work, lambda: 0.01, lead)
    try:
        await _until(lambda: len(tries) >= 3)
    finally:
        await loop.aclose()
    assert len(tries) >= 3
