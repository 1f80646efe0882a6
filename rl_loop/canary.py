"""Canary a routing policy or a model version on a share of traffic (ops tool).

Routing: the gateway's ``/admin/canary`` lets a candidate routing config decide ``share`` of the
requests (a stable hash of the request id), then promote or drop it::

    python -m rl_loop.canary routing --gateway URL --config candidate.yaml --share 0.1
    python -m rl_loop.canary promote --gateway URL
    python -m rl_loop.canary drop    --gateway URL

``candidate.yaml`` is a gateway config (its ``routing`` section is used) or a bare routing
section. The canary decides with the gateway's current learned state; to try another state,
replay it first (``python -m rl_loop.replay``).

Model: the new weights go to a subset of the replicas only (hot-swap with probe and rollback),
so that share of local traffic runs them; promote later with ``rl_loop.promote publish`` on the
rest, or swap the subset back::

    python -m rl_loop.canary model --gateway URL --replica URL --checkpoint NEW --previous OLD

The admin token comes from ``$SWITCHYARD_ADMIN_TOKEN``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml

from router.config import RoutingConfig
from serving.hotswap import HotSwapConfig, publish_weights
from serving.names import ADMIN_TOKEN_ENV


def routing_section(path: Path) -> dict[str, Any]:
    """The routing section of a gateway config file, or the file itself if it is one."""
    data = yaml.safe_load(path.read_text())
    section = data.get("routing", data) if isinstance(data, dict) else data
    RoutingConfig.model_validate(section)  # fail here, with the field named, not at the gateway
    return dict(section)


def admin_call(gateway: str, token: str, method: str, path: str, body: Any = None) -> Any:
    response = httpx.request(
        method,
        f"{gateway.rstrip('/')}{path}",
        json=body,
        headers={"authorization": f"Bearer {token}"},
        timeout=60.0,
    )
    if response.status_code != 200:
        raise SystemExit(f"{method} {path} failed ({response.status_code}): {response.text}")
    return response.json()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_loop.canary", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("routing", "promote", "drop", "model"):
        p = sub.add_parser(name)
        p.add_argument("--gateway", required=True, help="Gateway base URL.")
        if name == "routing":
            p.add_argument("--config", type=Path, required=True)
            p.add_argument("--share", type=float, required=True)
        if name == "model":
            p.add_argument("--replica", action="append", required=True)
            p.add_argument("--checkpoint", type=Path, required=True)
            p.add_argument("--previous", type=Path, required=True)
            p.add_argument("--target", default=HotSwapConfig.model_fields["target"].default)
    args = parser.parse_args(argv)
    token = os.environ.get(ADMIN_TOKEN_ENV)
    if not token:
        print(f"set {ADMIN_TOKEN_ENV} to the gateway's admin token", file=sys.stderr)
        return 2
    if args.command == "routing":
        body = {"routing": routing_section(args.config), "share": args.share}
        result = admin_call(args.gateway, token, "POST", "/admin/canary", body)
    elif args.command == "promote":
        result = admin_call(args.gateway, token, "POST", "/admin/canary/promote")
    elif args.command == "drop":
        result = admin_call(args.gateway, token, "DELETE", "/admin/canary")
    else:
        config = HotSwapConfig(gateway_url=args.gateway, admin_token=token, target=args.target)
        report = asyncio.run(publish_weights(args.checkpoint, args.previous, args.replica, config))
        result = {
            "version": report.version,
            "ok": report.ok,
            "rolled_back": report.rolled_back,
            "replicas": [r.replica for r in report.replicas],
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
