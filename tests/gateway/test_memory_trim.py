"""The gateway gives the C heap's free memory back to the system (gateway.memory_trim)."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from gateway.memory_trim import load_malloc_trim, trim_periodically


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim: Linux")
async def test_the_heap_is_trimmed_with_glibcs_malloc_trim_every_interval() -> None:
    trim = load_malloc_trim()
    assert trim is not None  # this box's Python runs on glibc
    calls: list[int] = []

    def counted(pad: int) -> int:
        calls.append(pad)
        return trim(pad)  # the real call: 1 when memory went back, 0 when none could

    task = asyncio.create_task(trim_periodically(0.01, counted))
    await asyncio.sleep(0.2)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert len(calls) >= 3 and set(calls) == {0}
