"""Giving the CPU back between slices of background work: the record writer process.

Why: on a kernel that does not preempt a running task when another wakes (``PREEMPT_NONE``, or
lazy preemption: the default of many server and VM kernels), a serving process that wakes on the
core where the writer computes waits until the writer blocks, makes a system call or the next
tick comes, whatever the writer's priority (``SCHED_IDLE`` included). A writer that yields every
few records lets it run at once; ``sched_yield`` costs a system call when nobody waits.
Measurements: docs/recording.md, "The child gives the CPU back every few records".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Final, TypeVar

T = TypeVar("T")

# The writer process's slice: records between two yields, so a serving process that wakes on
# the writer's core waits for a few records' work at most (docs/recording.md, "Figures behind
# traffic/'s choices").
WRITER_YIELD_EVERY: Final = 8

_SCHED_YIELD: Final[Callable[[], None] | None] = getattr(os, "sched_yield", None)


def yield_cpu() -> None:
    """Let a task waiting for this core run now (a no-op where the platform has no
    ``sched_yield``)."""
    if _SCHED_YIELD is not None:
        _SCHED_YIELD()


def slices(items: Sequence[T], every: int) -> Iterator[Sequence[T]]:
    """``items`` in slices of ``every``, the CPU given back (:func:`yield_cpu`) after each;
    ``every`` 0: all of them in one slice, no yield."""
    if not every:
        yield items
        return
    for start in range(0, len(items), every):
        yield items[start : start + every]
        yield_cpu()
