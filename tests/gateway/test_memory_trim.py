"""The gateway gives the C heap's free memory back to the system (gateway.memory_trim)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
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


_FAULTS_PER_FRAME = """
import resource, sys
from gateway.memory_trim import keep_freed_heap
if sys.argv[1] == "kept":
    assert keep_freed_heap(16 << 20, 32 << 20)
def frame():  # a writer process's batch: a frame read, its 80 streams copied out, all freed
    data = bytearray(400_000)
    streams = [bytes(data[i * 5000 : (i + 1) * 5000]) for i in range(80)]
    return len(data) + len(streams)
for _ in range(20):
    frame()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):
    frame()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux")
def test_a_kept_heap_serves_each_frame_without_faulting_its_pages_in_again() -> None:
    def faults(mode: str) -> int:
        done = subprocess.run(
            [sys.executable, "-c", _FAULTS_PER_FRAME, mode], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    # glibc's defaults give the freed top of the heap back: ~165 page faults a frame here
    assert faults("default") > 200 * 50
    assert faults("kept") < 200  # from the heap, reused
