"""Background tasks of a gateway process, kept referenced until they end (asyncio keeps only a
weak reference to a task: an unreferenced one may be collected mid-run)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any


class Background:
    """Tasks started off a request's path (shadow calls, token accounting, drain reports)."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
