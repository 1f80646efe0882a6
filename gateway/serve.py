"""Run the gateway: uvicorn with uvloop and httptools, SIGHUP reloads the routing config.

    python -m gateway --config switchyard.yaml [--host H] [--port P] [--workers N]

SIGTERM: uvicorn stops accepting connections, in-flight requests finish (up to
``limits.drain_timeout_s``), then the app's shutdown flushes the traffic store's writer.
``--workers N`` runs N such processes on one socket (default: one per core with a Redis fleet,
else one; :mod:`gateway.workers`), SIGTERM draining them all.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import math
import signal
import socket
import sys
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

from gateway.admin.changes import SIGHUP_ACTOR, record_reload
from gateway.admin.subcommand import Subcommand, run_alone
from gateway.app import ABORT_GRACE_S, create_app, stop_deadline_s
from gateway.config import ConfigFileError, SwitchyardConfig, load_config
from gateway.state import GatewayState
from gateway.workers import WorkersRefused, resolve_workers, run_workers

log = logging.getLogger("switchyard")

GC_GEN0_THRESHOLD = 20_000


async def _reload(app: Starlette) -> None:
    state: GatewayState | None = getattr(app.state, "switchyard", None)
    if state is None:
        return
    previous = state.routing.policy.version
    try:
        routing = await state.reloader.reload()
    except (ConfigFileError, ValueError) as exc:
        log.error("SIGHUP reload refused, keeping the running policy: %s", exc)
        return
    version = routing.policy.version
    log.info("routing reloaded on SIGHUP: policy %s", version)
    await record_reload(getattr(app.state, "recorder", None), SIGHUP_ACTOR, previous, version)


class GatewayServer(uvicorn.Server):
    """uvicorn's server, telling the gateway the moment shutdown starts.

    uvicorn runs the app's shutdown only after its connections are done, and cancels what is
    left at its own deadline, which ends a request without an answer or a record. Told at once,
    the gateway answers ``/ready`` with 503 and, at ``drain_timeout_s``, ends what is still in
    flight itself: an error in the door's shape (or the stream's error event) and a record.
    uvicorn's own deadline stays a backstop, ``ABORT_GRACE_S`` later.
    """

    def __init__(self, config: uvicorn.Config, app: Starlette) -> None:
        super().__init__(config)
        self._app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state: GatewayState | None = getattr(self._app.state, "switchyard", None)
        if state is not None:
            state.requests.begin_drain(state.config.gateway.limits.drain_timeout_s)
        await super().shutdown(sockets)


def uvicorn_config(
    app: Starlette, config: SwitchyardConfig, host: str, port: int
) -> uvicorn.Config:
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


async def serve(
    config_path: Path,
    host: str | None,
    port: int | None,
    sock: socket.socket | None = None,
) -> None:
    """Serve until SIGTERM, on ``host:port`` or on ``sock`` (a worker of several)."""
    config = load_config(config_path)
    app = create_app(config, config_path)
    listen = config.gateway.listen
    server = GatewayServer(
        uvicorn_config(app, config, host or listen.host, port or listen.port), app
    )
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, lambda: loop.create_task(_reload(app)))
    await server.serve(sockets=[sock] if sock is not None else None)


def _setup_process() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(process)d %(name)s %(message)s"
    )
    # Each request allocates a few hundred short-lived objects (tasks, dicts); a larger first
    # generation means far fewer collections on the request path.
    gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)


def run_worker(config_path: Path, sock: socket.socket, index: int) -> None:
    """One worker of ``--workers N`` (:mod:`gateway.workers`), serving on ``sock``."""
    import uvloop

    _setup_process()
    log.info("worker %d serving", index)
    uvloop.run(serve(config_path, None, None, sock))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, required=True, help="YAML config file")
    parser.add_argument("--host", default=None, help="override gateway.listen.host")
    parser.add_argument("--port", type=int, default=None, help="override gateway.listen.port")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="gateway processes on this host (default: one per core with a Redis fleet, else 1)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM (``--workers N``: supervise N serving processes)."""
    _setup_process()
    config = load_config(args.config)
    try:
        workers = resolve_workers(config, args.workers)
    except WorkersRefused as exc:  # a usage error, as argparse answers one
        print(f"switchyard serve: error: {exc}", file=sys.stderr)
        return 2
    if workers > 1:
        listen = config.gateway.listen
        host = args.host or listen.host
        port = listen.port if args.port is None else args.port
        deadline = stop_deadline_s(config.gateway.limits)
        return run_workers(args.config, host, port, workers, deadline, run_worker)
    import uvloop

    uvloop.run(serve(args.config, args.host, args.port))
    return 0


SUBCOMMAND = Subcommand("serve", "run the gateway", add_arguments, run)


def main(argv: list[str] | None = None) -> int:
    return run_alone(SUBCOMMAND, "python -m gateway", argv)


if __name__ == "__main__":
    raise SystemExit(main())
