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
import signal
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from gateway.app import create_app
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
        timeout_graceful_shutdown=int(config.gateway.limits.drain_timeout_s) or None,
        timeout_keep_alive=30,
        backlog=4096,
    )


async def serve(config_path: Path, host: str | None, port: int | None) -> None:
    config = load_config(config_path)
    app = create_app(config, config_path)
    listen = config.gateway.listen
    server = uvicorn.Server(uvicorn_config(app, config, host or listen.host, port or listen.port))
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
