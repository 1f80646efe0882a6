"""Run agent episodes through a gateway and print what they measured.

    python -m loadtests.agent.run --gateway http://127.0.0.1:8000 \\
        --oracle-url http://127.0.0.1:8901 --episodes 20 --seed 1

Prints JSON: success rate, steps per success, tool-call validity, steps per route target, cost
per episode and failed requests, overall, per task kind and per API (``AgentRunStats.report``);
``--episodes-out FILE`` also writes one JSON line per episode (the client's bookkeeping: task,
verdict, each step's target, latency and tool calls). Every flag is a field of
:class:`~loadtests.agent.client.AgentClientConfig` (its defaults apply when a flag is left out);
tuple fields take comma-separated values (``--kinds fix_bug,implement``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loadtests.agent.client import AgentClientConfig, run_agent_client

_NESTED = frozenset({"sandbox"})


def build_parser() -> argparse.ArgumentParser:
    """One flag per config field; unset flags leave the config's own defaults."""
    parser = argparse.ArgumentParser(
        prog="python -m loadtests.agent.run", description=(__doc__ or "").split("\n")[0]
    )
    for name, info in AgentClientConfig.model_fields.items():
        if name in _NESTED:
            continue
        flag = "--" + name.replace("_", "-")
        required = info.is_required()
        if info.annotation is bool:
            parser.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                help=info.description,
            )  # fmt: skip
        else:
            parser.add_argument(
                flag, dest=name, required=required, default=argparse.SUPPRESS,
                help=info.description,
            )  # fmt: skip
    parser.add_argument("--episodes-out", type=Path, help="write one JSON line per episode")
    return parser


def config_from_args(args: dict[str, Any]) -> AgentClientConfig:
    fields = AgentClientConfig.model_fields
    values: dict[str, Any] = {}
    for name, value in args.items():
        origin = typing.get_origin(fields[name].annotation)
        values[name] = tuple(v for v in value.split(",") if v) if origin is tuple else value
    return AgentClientConfig.model_validate(values)


def main(argv: Sequence[str] | None = None) -> int:
    args = vars(build_parser().parse_args(argv))
    out = args.pop("episodes_out", None)
    config = config_from_args(args)
    stats = asyncio.run(run_agent_client(config))
    json.dump(stats.report(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    if out is not None:
        lines = "".join(json.dumps(e.as_dict()) + "\n" for e in stats.episodes)
        out.write_text(lines, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
