"""Drawing task content reproducibly, inside a seed's split.

Every family draws a task's content from ``random.Random(f"{family}:{seed}:{attempt}")`` and
redraws (next attempt) until the content's hash lands in the seed's split
(:func:`~tasks.ide.task.content_split`), so train and held-out contents never overlap and a
task id always regenerates the same task.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tasks.ide.task import Task, content_split, split_of

WORDS = ("cache", "route", "token", "model", "queue", "batch", "shard", "index", "delta")
"""Short identifiers the synthetic families put in names, strings and file names."""

FILE_KINDS = ("utils", "service", "core", "tools", "handlers", "models", "client", "check")
"""Module name endings of :func:`workspace_file`."""

Build = Callable[[random.Random], "tuple[str, Task] | None"]


def workspace_file(rng: random.Random) -> str:
    """The shown file's name for a synthetic task, drawn from one pool shared by every family.

    A family-specific name (``*_hover.py`` for one family, ``scratch.py`` for another) would be
    a task tag in disguise: the router must tell families apart by what real users send.
    """
    return f"{rng.choice(WORDS)}_{rng.choice(FILE_KINDS)}.py"


def attempt_rng(name: str, seed: int, attempt: int) -> random.Random:
    """The RNG of one drawing attempt of family ``name`` for ``seed``."""
    return random.Random(f"{name}:{seed}:{attempt}")


def until_split(name: str, seed: int, build: Build, max_attempts: int = 200) -> Task:
    """Draw ``(content, task)`` candidates until one's content lands in ``seed``'s split.

    ``build`` may return None for a candidate it cannot use (the next attempt is drawn).
    Raises RuntimeError after ``max_attempts`` (a generator bug, not bad luck: 10% of contents
    are held out).
    """
    split = split_of(seed)
    for attempt in range(max_attempts):
        built = build(attempt_rng(name, seed, attempt))
        if built is not None and content_split(built[0]) == split:
            return built[1]
    raise RuntimeError(f"{name}: no task in split {split} for seed {seed}")
