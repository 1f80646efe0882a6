"""CLI: ``python -m loadtests.frontier_sim --host 127.0.0.1 --port 8901 [--ttft-ms 200] ...``.

One flag per :class:`SimulatorConfig` field (``--field-name``), generated from the model so help
texts and defaults are defined only there.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import typing
from collections.abc import Coroutine
from typing import Any

from pydantic import ValidationError

from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.runner import DEFAULT_HOST, SimulatorServer

DEFAULT_PORT = 8901


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.frontier_sim",
        description="Simulated OpenAI/Anthropic upstream with latency, price and error knobs.",
    )
    parser.add_argument("--host", default=DEFAULT_HOST, help="address to bind (%(default)s)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (%(default)s)")
    for name, info in SimulatorConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = info.default
        shown = " ".join(default) if isinstance(default, tuple) else default
        help_text = f"{info.description} (default: {shown})".replace("%", "%%")
        if info.annotation is bool:
            parser.add_argument(
                flag,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif typing.get_origin(info.annotation) is tuple:
            parser.add_argument(flag, nargs="+", default=argparse.SUPPRESS, help=help_text)
        else:
            # Strings here; the config model converts and validates them.
            parser.add_argument(flag, default=argparse.SUPPRESS, help=help_text)
    return parser


async def _serve_forever(config: SimulatorConfig, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with SimulatorServer(config, host=host, port=port) as sim:
        print(f"frontier simulator serving on {sim.base_url}", flush=True)
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = vars(parser.parse_args(argv))
    host, port = args.pop("host"), args.pop("port")
    try:
        config = SimulatorConfig.model_validate(args)
    except ValidationError as exc:
        parser.error(str(exc))
    _run(_serve_forever(config, host, port))


def _run(main_coroutine: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(main_coroutine)
        return
    uvloop.run(main_coroutine)


if __name__ == "__main__":
    main()
