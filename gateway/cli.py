"""The gateway's command line (`switchyard`), every subcommand registered here.

    switchyard serve --config switchyard.yaml [--workers N]       (gateway.serve)
    switchyard traffic summary|export|canonicalize|episode|episode-export|lineage ...
                                                                  (gateway.admin.traffic_cli)
    switchyard keys create|list|revoke ...                        (gateway.admin.keys_cli)
    switchyard fleet status|reload|drain|undrain --gateway URL    (gateway.admin.fleet_cli)

Each command module defines its :class:`~gateway.admin.subcommand.Subcommand`; this list is the
one place they meet, so no module imports the command line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Final

from gateway import serve
from gateway.admin import fleet_cli, keys_cli, traffic_cli
from gateway.admin.subcommand import Subcommand

SUBCOMMANDS: Final[tuple[Subcommand, ...]] = (
    serve.SUBCOMMAND,
    traffic_cli.SUBCOMMAND,
    keys_cli.SUBCOMMAND,
    fleet_cli.SUBCOMMAND,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(p)
        p.set_defaults(command_run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    result: int = args.command_run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
