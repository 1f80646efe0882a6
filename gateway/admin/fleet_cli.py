"""``switchyard fleet``: act on the whole fleet through any one of its gateways (admin API).

    switchyard fleet status  --gateway URL
    switchyard fleet reload  --gateway URL
    switchyard fleet drain   --gateway URL --replica URL [--target local] [--timeout-s S]
    switchyard fleet undrain --gateway URL --replica URL [--target local] [--weights-version V]

``--gateway`` is any gateway of the fleet (or the balancer in front of them): a reload, drain or
undrain it accepts reaches every gateway of the fleet. The admin credential is read from
``$SWITCHYARD_ADMIN_TOKEN``. Prints the gateway's JSON answer; exits 1 on an error answer (and a
drain that left requests in flight), 2 when the gateway cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import httpx

from gateway.admin.subcommand import Subcommand, run_alone
from serving.names import ADMIN_TOKEN_ENV

DEFAULT_TARGET = "local"
CLIENT_TIMEOUT_S = 30.0  # a drain waits as long as the gateway does (its timeout_s)


def _call(args: argparse.Namespace, method: str, path: str, body: dict[str, Any] | None) -> int:
    token = os.environ.get(ADMIN_TOKEN_ENV)
    if not token:
        print(f"set {ADMIN_TOKEN_ENV} to the gateways' admin token", file=sys.stderr)
        return 2
    timeout = None if args.command == "drain" else CLIENT_TIMEOUT_S
    try:
        response = httpx.request(
            method,
            args.gateway.rstrip("/") + path,
            json=body,
            headers={"authorization": f"Bearer {token}"},
            timeout=timeout,
        )
    except httpx.HTTPError as exc:
        print(f"{args.gateway}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        answer = response.json()
    except ValueError:
        answer = {"status": response.status_code, "body": response.text}
    print(json.dumps(answer, indent=2))
    if response.status_code != 200:
        return 1
    return 1 if path.endswith("/drain") and not answer.get("drained") else 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``switchyard fleet status|reload|drain|undrain --gateway URL``."""
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "reload", "drain", "undrain"):
        p = sub.add_parser(name)
        p.add_argument("--gateway", required=True, help="any gateway of the fleet")
        if name in ("drain", "undrain"):
            p.add_argument("--replica", required=True, help="replica base URL")
            p.add_argument("--target", default=DEFAULT_TARGET, help="local target holding it")
    sub.choices["drain"].add_argument(
        "--timeout-s", type=float, help="wait this long for in-flight requests (server default)"
    )
    sub.choices["undrain"].add_argument("--weights-version", default=None)


def run(args: argparse.Namespace) -> int:
    if args.command == "status":
        return _call(args, "GET", "/admin/fleet", None)
    if args.command == "reload":
        return _call(args, "POST", "/admin/reload", None)
    replica = {"target": args.target, "replica": args.replica}
    if args.command == "drain":
        wait = {"timeout_s": args.timeout_s} if args.timeout_s is not None else {}
        return _call(args, "POST", "/admin/replicas/drain", {**replica, **wait})
    body = {**replica, "weights_version": args.weights_version}
    return _call(args, "POST", "/admin/replicas/undrain", body)


SUBCOMMAND = Subcommand(
    "fleet", "the gateway fleet: status, reload, drain, undrain", add_arguments, run
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_alone(SUBCOMMAND, "switchyard fleet", argv)
