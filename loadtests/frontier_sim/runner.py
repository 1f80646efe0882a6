"""Run the simulator: inside a running event loop, or on a background thread for sync callers.

async with SimulatorServer(SimulatorConfig(ttft_ms=50)) as sim:
    ...  # sim.base_url == "http://127.0.0.1:<free port>"

sim = run_in_thread(SimulatorConfig())
try: ... finally: sim.stop()
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any

from aiohttp import web

from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.server import STATE, SimulatorStats, build_app

DEFAULT_HOST = "127.0.0.1"
_START_TIMEOUT_S = 30.0


class SimulatorServer:
    """The simulator served on the current event loop; ``port=0`` binds a free port."""

    def __init__(
        self, config: SimulatorConfig | None = None, *, host: str = DEFAULT_HOST, port: int = 0
    ) -> None:
        self.config = config or SimulatorConfig()
        self.host = host
        self.port = port
        self.app = build_app(self.config)
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        """``http://host:port`` without a trailing slash; append ``/v1`` for OpenAI clients."""
        return f"http://{self.host}:{self.port}"

    @property
    def stats(self) -> SimulatorStats:
        return self.app[STATE].stats

    async def start(self) -> None:
        runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> SimulatorServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


class ThreadedSimulator:
    """A :class:`SimulatorServer` running on its own event loop in a daemon thread."""

    def __init__(self, server: SimulatorServer) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="frontier-sim", daemon=True)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def config(self) -> SimulatorConfig:
        return self.server.config

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(_START_TIMEOUT_S):
            raise TimeoutError("frontier simulator did not start")
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as exc:  # handed to the starting thread, which re-raises it
            self._error = exc
            self._started.set()
            self._loop.close()
            return
        self._started.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self.server.stop())
            self._loop.close()

    def stop(self) -> None:
        """Stop serving and join the thread; safe to call twice."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(_START_TIMEOUT_S)

    def __enter__(self) -> ThreadedSimulator:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()


def run_in_thread(
    config: SimulatorConfig | None = None, *, host: str = DEFAULT_HOST, port: int = 0
) -> ThreadedSimulator:
    """Start the simulator on a background thread and return once it accepts connections."""
    handle = ThreadedSimulator(SimulatorServer(config, host=host, port=port))
    handle.start()
    return handle
