"""One ``switchyard`` subcommand: its name, its arguments, how it runs.

Each command module defines one (``SUBCOMMAND``); :mod:`gateway.cli` registers them all in one
list, so nothing below imports the command line (vLLM's ``entrypoints/cli`` is the model). A
module run on its own (``python -m gateway``) parses with :func:`run_alone`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Subcommand:
    """``switchyard <name> ...``: ``add_arguments`` fills its parser, ``run`` does it (the exit
    status)."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def run_alone(command: Subcommand, prog: str, argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` with ``command``'s arguments alone and run it."""
    parser = argparse.ArgumentParser(prog=prog, description=command.help)
    command.add_arguments(parser)
    return command.run(parser.parse_args(argv))
