"""Refit the learned routing from the record, once or on a schedule, and tell the gateway.

    python -m rl_loop.refit_cli --config switchyard.yaml [--store URL]
        [--gateway URL ...] [--every-s 3600] [--rounds N] [--weights-version V] [--labels FILE]

The RL loop refits after every promotion (``rl_loop.loop``); this runs the same refit between
promotions, as traffic keeps adding verdicts: outcomes from the store (``rl_loop.refit``), the
fitted state written to the config's ``routing.learned.state_file``, a policy version recorded,
and ``POST /admin/reload`` on the gateway fleet (admin token from ``$SWITCHYARD_ADMIN_TOKEN``):
one gateway's reload reaches every gateway of its fleet, so the first ``--gateway`` that accepts
it is enough (give several, or the balancer's address, to ride over one being down). The
learned policy's ``local_target`` is the local arm; every other target is a frontier arm.
``--weights-version`` counts local outcomes of those weights only (the served ones); without it
every local outcome counts. SIGTERM or SIGINT ends the schedule between rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

from rl_loop.config import RefitConfig
from rl_loop.labels import load_labels, with_labels
from rl_loop.outcomes import VerdictCache
from rl_loop.refit import RefitReport, refit_policy, reload_gateway
from rl_loop.replay import VERDICTS_FILE, config_store_url, load_routing
from serving.names import ADMIN_TOKEN_ENV
from traffic.store import StoreConfig, open_store


async def refit_once(args: argparse.Namespace) -> RefitReport:
    routing, _ = load_routing(args.config)
    if routing.learned is None or not routing.learned.state_file:
        raise SystemExit("the config has no routing.learned.state_file to refit")
    state_file = Path(routing.learned.state_file)
    store = open_store(StoreConfig(url=args.store))
    await store.connect()
    try:
        reader = with_labels(store, load_labels(args.labels)) if args.labels else store
        report = await refit_policy(
            reader,
            state_file=state_file,
            weights_version=args.weights_version,
            verify=None,  # verdicts: feedback, and shadow verdicts recorded or cached
            config=RefitConfig(current_version_only=args.weights_version is not None),
            local_target=routing.learned.local_target,
            frontier_prefix="",  # every target but the local one is a frontier arm
            cache=VerdictCache(state_file.parent / VERDICTS_FILE),
        )
    finally:
        await store.close()
    token = os.environ.get(ADMIN_TOKEN_ENV)
    if args.gateway and token:
        report.policy_version = await reload_fleet(args.gateway, token)
        report.reloaded = True
    return report


async def reload_fleet(gateways: Sequence[str], admin_token: str) -> str:
    """Reload through the first gateway that accepts it (it reaches the whole fleet)."""
    errors = []
    for url in gateways:
        try:
            return await reload_gateway(url, admin_token)
        except (httpx.HTTPError, RuntimeError) as exc:
            errors.append(f"{url}: {exc}")
    raise RuntimeError("no gateway accepted the reload: " + "; ".join(errors))


async def _schedule(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    if threading.current_thread() is threading.main_thread():  # signals reach the main thread
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    done = 0
    while not stop.is_set():
        started = time.monotonic()
        report = await refit_once(args)
        print(json.dumps(report.to_json()), flush=True)
        done += 1
        if args.every_s is None or (args.rounds and done >= args.rounds):
            break
        wait = max(0.0, args.every_s - (time.monotonic() - started))
        try:
            await asyncio.wait_for(stop.wait(), wait)
        except TimeoutError:
            continue
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_loop.refit_cli", description=__doc__)
    parser.add_argument(
        "--store", default=None, help="traffic store URL (default: the config's store.url)"
    )
    parser.add_argument("--config", type=Path, required=True, help="the gateway's YAML config")
    parser.add_argument(
        "--gateway",
        action="append",
        default=None,
        help="a gateway of the fleet to reload after each fit (repeat: tried in order)",
    )
    parser.add_argument("--every-s", type=float, default=None, help="refit on this schedule")
    parser.add_argument("--rounds", type=int, default=0, help="stop after N fits (0: never)")
    parser.add_argument("--weights-version", default=None, help="the served local weights")
    parser.add_argument("--labels", type=Path, default=None, help="client-side labels (JSON)")
    args = parser.parse_args(argv)
    args.store = args.store or config_store_url(args.config)
    return asyncio.run(_schedule(args))


if __name__ == "__main__":
    raise SystemExit(main())
