"""Noticing a client that went away, and the streamed answer that notices it.

:class:`ClientWatch` cancels the task serving a request when its client disconnects: the
upstream call is dropped (a local replica stops generating, a provider stops billing) and the
exchange is recorded as 499. :func:`gateway.doors.skeleton.serve_door` watches while the answer has
not started; :class:`WatchedStream` watches while a stream is relayed.

Why :class:`WatchedStream` and not Starlette's ``StreamingResponse``: under uvicorn (ASGI spec
2.3, where sending to a gone client is silently dropped) Starlette runs each stream in an anyio
task group, a task relaying and a task listening for the disconnect, with a cancel scope that
formats the task's repr when it cancels; that machinery was over a tenth of the gateway's CPU
for a short stream (docs/hot_path.md). One task relaying, and a timer that starts a watcher only
for a stream still running after :data:`WATCH_AFTER_S`, do the same job.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import Final

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

# How long a request runs before its client is watched for leaving.
WATCH_AFTER_S: Final = 0.05


class ClientWatch:
    """Cancels the current task when the client disconnects; ``gone`` says it did. ``stop()``
    before the answer's last message is sent (uvicorn also reports the end of a response as a
    disconnect).

    The watching task starts only when the request is still unanswered after
    :data:`WATCH_AFTER_S`: a task per request (created, stepped, cancelled, stepped again) costs
    the loop about seven times what a timer does (docs/hot_path.md), and most answers from a
    local replica or a fast upstream come sooner. A client gone meanwhile is noticed when the
    task starts (uvicorn remembers the disconnect), so an upstream call outlives its client by
    at most that long."""

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self._task = asyncio.current_task()
        self._receive = receive
        self._watcher: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            WATCH_AFTER_S, self._start
        )

    def _start(self) -> None:
        self._timer = None
        if self._task is not None:
            self._watcher = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass  # the body was read whole: nothing else comes before the disconnect
        if self._task is not None:
            self.gone = True
            self._task.cancel()

    def stop(self) -> None:
        self._task = None
        if self._timer is not None:
            self._timer.cancel()
        if self._watcher is not None:
            self._watcher.cancel()


class WatchedStream(Response):
    """A streamed answer relayed by the request's own task. When the client leaves, the task
    is cancelled where it waits (the upstream's next bytes, or the socket), the body's
    iterator is closed (it records the exchange as 499), and the response ends quietly."""

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        status_code: int,
        headers: Mapping[str, str],
        media_type: str,
    ) -> None:
        self.body_iterator = body
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = self.body_iterator
        watch = ClientWatch(receive)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for chunk in body:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            watch.stop()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not watch.gone or task is None:
                raise
            task.uncancel()  # the client left: nobody reads the rest, and nothing failed
        finally:
            watch.stop()
            await body.aclose()
