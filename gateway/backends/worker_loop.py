"""An event loop on a thread of its own, where litellm's calls run.

Why: litellm (through the OpenAI SDK's request transform) does its per-message work
synchronously inside its async calls; on the gateway's event loop a very long conversation held
every other request, ``/health`` included, for seconds (docs/hot_path.md). On this loop the same
work only takes the GIL in turns (the interpreter hands it back every few milliseconds), so the
gateway's loop keeps answering.

Every litellm call and every step of its streams runs here, never on the gateway's loop: litellm
caches its HTTP clients, and a client must stay on the loop it was made on. The cost is two
thread hand-offs per call and one per streamed chunk (tens of microseconds), against
milliseconds of litellm's own work per call.

Cancelling the awaiting task (client gone, shutdown) cancels the work on this loop too
(:func:`asyncio.run_coroutine_threadsafe` chains the cancellation).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_END = object()
_CLOSE_TIMEOUT_S = 5.0


class WorkerLoop:
    """Runs coroutines on a private event loop thread; :meth:`close` stops it."""

    def __init__(self, name: str = "switchyard-worker-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the worker loop from any other loop."""
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return await asyncio.wrap_future(future)

    async def step(self, source: AsyncIterator[T]) -> T:
        """The next item of ``source`` (an async iterator of the worker loop), taken there;
        ``StopAsyncIteration`` at its end."""
        item = await self.run(_next(source))
        if item is _END:
            raise StopAsyncIteration
        return item  # type: ignore[return-value]  # _END handled above

    async def iterate(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        """Every remaining item of ``source``, each step taken on the worker loop."""
        while True:
            try:
                item = await self.step(source)
            except StopAsyncIteration:
                return
            yield item

    async def aclose_iterator(self, source: AsyncIterator[Any]) -> None:
        """Close an async generator that lives on the worker loop, there."""
        close = getattr(source, "aclose", None)
        if close is not None:
            await self.run(close())

    def close(self) -> None:
        """Cancel what still runs on the loop (litellm keeps a logging task there), stop the
        loop and join its thread. Blocking: call it from a thread."""
        if self._loop.is_closed():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_all(), self._loop).result(_CLOSE_TIMEOUT_S)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_CLOSE_TIMEOUT_S)
        if not self._thread.is_alive():
            self._loop.close()


async def _next(source: AsyncIterator[T]) -> T | object:
    # StopAsyncIteration cannot cross a future cleanly: a sentinel says the end.
    try:
        return await source.__anext__()
    except StopAsyncIteration:
        return _END


async def _cancel_all() -> None:
    me = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not me]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
