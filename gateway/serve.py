"""Run the gateway: uvicorn with uvloop and httptools, SIGHUP reloads the routing config.

    python -m gateway --config switchyard.yaml [--host H] [--port P]

SIGTERM: uvicorn stops accepting connections, in-flight requests finish (up to
``limits.drain_timeout_s``), then the app's shutdown flushes the traffic store's writer.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import signal
import socket
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from gateway.app import ABORT_GRACE_S, create_app
from gateway.config import ConfigFileError, SwitchyardConfig, load_config
from gateway.state import GatewayState

log = logging.getLogger("switchyard")

GC_GEN0_THRESHOLD = 20_000


async def _reload(app: FastAPI) -> None:
    state: GatewayState | None = getattr(app.state, "switchyard", None)
    if state is None:
        return
    try:
        routing = await state.reload()
    except (ConfigFileError, ValueError) as exc:
        log.error("SIGHUP reload refused, keeping the running policy: %s", exc)
        return
    log.info("routing reloaded on SIGHUP: policy %s", routing.policy.version)


class GatewayServer(uvicorn.Server):
    """uvicorn's server, telling the gateway the moment shutdown starts.

    uvicorn runs the app's shutdown only after its connections are done, and cancels what is
    left at its own deadline, which ends a request without an answer or a record. Told at once,
    the gateway answers ``/ready`` with 503 and, at ``drain_timeout_s``, ends what is still in
    flight itself: an error in the door's shape (or the stream's error event) and a record.
    uvicorn's own deadline stays a backstop, ``ABORT_GRACE_S`` later.
    """

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state: GatewayState | None = getattr(self._app.state, "switchyard", None)
        if state is not None:
            state.begin_drain()
        await super().shutdown(sockets)


def uvicorn_config(app: FastAPI, config: SwitchyardConfig, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=False,
        log_level="info",
        timeout_graceful_shutdown=math.ceil(config.gateway.limits.drain_timeout_s + ABORT_GRACE_S),
        timeout_keep_alive=30,
        backlog=4096,
    )


async def serve(config_path: Path, host: str | None, port: int | None) -> None:
    config = load_config(config_path)
    app = create_app(config, config_path)
    listen = config.gateway.listen
    server = GatewayServer(
        uvicorn_config(app, config, host or listen.host, port or listen.port), app
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(_reload(app)))
    await server.serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="YAML config file")
    parser.add_argument("--host", default=None, help="override gateway.listen.host")
    parser.add_argument("--port", type=int, default=None, help="override gateway.listen.port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    import uvloop

    # Each request allocates a few hundred short-lived objects (tasks, dicts); a larger first
    # generation means far fewer collections on the request path.
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)
    uvloop.run(serve(args.config, args.host, args.port))


if __name__ == "__main__":
    main()
