"""A tiny asyncio TCP forwarder, to cut a client off a server that stays up.

``stop()`` closes the listening socket and aborts every forwarded connection (the client sees
"server closed the connection"); ``start()`` again listens on the same port. ``stall()`` keeps
connections open (and accepts new ones) but forwards nothing until ``resume()``: a frozen server.
``stall_on(marker)`` freezes only the connections that send ``marker`` (a statement's text, say),
from the message that carries it, until ``resume()``: one frozen connection among healthy ones.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Link:
    """One forwarded connection: whether it flows, and the end of what its client sent."""

    flowing: asyncio.Event = field(default_factory=asyncio.Event)
    tail: bytes = b""  # a marker may straddle two reads


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.WriteTransport] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._links: set[_Link] = set()
        self._markers: set[bytes] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    @property
    def stalled(self) -> bool:
        """True between ``stall()`` and ``resume()``."""
        return not self._flowing.is_set()

    @property
    def frozen_connections(self) -> int:
        """Connections frozen by a ``stall_on`` marker."""
        return sum(not link.flowing.is_set() for link in self._links)

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for transport in list(self._transports):
            transport.abort()
        self._transports.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def stall(self) -> None:
        """Keep connections open but forward nothing: a server that never answers."""
        self._flowing.clear()

    def stall_on(self, marker: bytes) -> None:
        """Freeze each connection whose client sends ``marker``, from that message on."""
        self._markers.add(marker)

    def resume(self) -> None:
        """Everything flows again; ``stall_on`` markers are forgotten."""
        self._markers.clear()
        for link in self._links:
            link.flowing.set()
        self._flowing.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        self._transports.update((writer.transport, up_writer.transport))
        link = _Link()
        link.flowing.set()
        self._links.add(link)
        for src, dst, upstream in ((reader, up_writer, True), (up_reader, writer, False)):
            task = asyncio.create_task(self._pipe(src, dst, link, upstream=upstream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: _Link, *, upstream: bool
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(65536):
                if upstream and self._markers:
                    seen = link.tail + data
                    if any(marker in seen for marker in self._markers):
                        link.flowing.clear()
                    link.tail = seen[-max(map(len, self._markers)) :]
                await self._flowing.wait()
                await link.flowing.wait()
                dst.write(data)
                await dst.drain()
        dst.transport.abort()
        self._links.discard(link)
