"""Give the C heap's free memory back to the system every ``gateway.memory_trim_interval_s``.

Why: a long streamed answer (256 tokens is ~70 KB of raw bytes, kept for the record until its
batch goes to the writer) is allocated and freed by glibc's malloc below its dynamic mmap
threshold, so the heap grows with a burst of them and its freed pages stay resident, up to near
issue 16's 300 MB; one ``malloc_trim(0)`` gives back about a fifth of it. A fixed mmap threshold
(``MALLOC_MMAP_THRESHOLD_``) held RSS down too, but each long stream then paid fresh page faults
and long streams lost throughput (docs/recording.md, "The heap: trimmed in the serving process,
kept in the writer"), so the gateway trims instead: on a worker thread (ctypes releases the GIL),
every interval, a few milliseconds at a time. Where there is no glibc (musl, macOS) it does
nothing.

The record writer process is the other way round (:func:`keep_freed_heap`): it allocates and
frees a frame of the pipe (~400 KB for 80 short streams) every batch, which glibc's default
thresholds hand back to the system and fault in again, so it fixes both thresholds high and
reuses its heap.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import sys
from collections.abc import Callable

log = logging.getLogger(__name__)

Trim = Callable[[int], int]

_M_TRIM_THRESHOLD = -1  # mallopt's parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def load_malloc_trim() -> Trim | None:
    """glibc's ``malloc_trim``; None where the C library has none."""
    libc = _libc()
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


async def trim_periodically(interval_s: float, trim: Trim | None = None) -> None:
    """Trim the heap every ``interval_s`` until cancelled (``trim``: glibc's by default)."""
    trim = trim or load_malloc_trim()
    if trim is None:
        log.info("no malloc_trim in this C library: the heap is not trimmed")
        return
    while True:
        await asyncio.sleep(interval_s)
        await asyncio.to_thread(trim, 0)


def keep_freed_heap(mmap_threshold: int, trim_threshold: int) -> bool:
    """Fix glibc's thresholds: blocks below ``mmap_threshold`` come from the heap, and free
    memory at its top is given back only beyond ``trim_threshold``; False without glibc.

    Both, or neither: setting one turns off glibc's adjustment of the other (either alone
    changed nothing). Both took about half or more of the writer process's system CPU (page
    faults) off each record, at about the same memory (docs/recording.md, "The heap: trimmed in
    the serving process, kept in the writer")."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(
        mallopt(_M_MMAP_THRESHOLD, mmap_threshold) and mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )
