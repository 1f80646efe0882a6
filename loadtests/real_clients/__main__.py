"""CLI: run one real coding client against a gateway, by hand.

``python -m loadtests.real_clients --client claude-code --version newest --gateway
http://127.0.0.1:8080 --key sk-... [--workspace DIR] [--model auto] -- "prompt"``

Installs the client if needed (``$SWITCHYARD_CACHE/clients``), runs it in ``--workspace`` (the
current directory by default) and prints its stdout and stderr; the exit code is the client's.
Defaults come from :mod:`loadtests.real_clients.drivers`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from loadtests.real_clients.drivers import (
    DEFAULT_MAX_TURNS,
    DEFAULT_MODEL,
    DEFAULT_TIMEOUT_S,
    ClientRun,
    run_client,
)
from loadtests.real_clients.install import ClientInstallError, install
from loadtests.real_clients.versions import CLIENTS


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m loadtests.real_clients", description=__doc__)
    parser.add_argument("--client", required=True, choices=sorted(CLIENTS))
    parser.add_argument("--version", default="pinned", help="newest, pinned or X (%(default)s)")
    parser.add_argument("--gateway", required=True, help="base URL without /v1")
    parser.add_argument("--key", required=True, help="API key for the gateway")
    parser.add_argument("--workspace", type=Path, default=Path.cwd())
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model name (%(default)s)")
    parser.add_argument("--max-turns", type=int, default=DEFAULT_MAX_TURNS)
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_TIMEOUT_S)
    parser.add_argument("--cache-dir", type=Path, default=None, help="instead of SWITCHYARD_CACHE")
    parser.add_argument("prompt", nargs="+", help="the prompt (after --)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        client = install(args.client, args.version, args.cache_dir)
    except ClientInstallError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"[{client.name} {client.version}: {client.executable}]", file=sys.stderr, flush=True)
    run = ClientRun(
        client=client,
        workspace=args.workspace.resolve(),
        gateway_url=args.gateway.rstrip("/"),
        api_key=args.key,
        model=args.model,
        max_turns=args.max_turns,
        timeout_s=args.timeout_s,
    )
    result = run_client(run, " ".join(args.prompt))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
