"""Promotion and rollback of the served model, through the hot-swap and the model registry.

Promote: ``serving.hotswap.publish_weights`` swaps the replicas one at a time behind the
gateway's drain/undrain, checking each with the logprob probe and rolling back by itself when a
probe fails. Only when every replica serves the new weights is the version recorded
``promoted`` (and the one it replaced ``retired``); a swap that rolled back records the candidate
``rejected``.

Rollback (one command): the version served now (the newest ``promoted`` one in the store) is
replaced by the version it replaced (the newest ``retired`` one, whose directory must still
exist), by the same hot-swap; the rolled-back version becomes ``rejected``, the restored one
``promoted``. A checkpoint tainted by a forget (``traffic.forget``) is never published: neither
promoted nor rolled back to.

CLI (admin token from ``$SWITCHYARD_ADMIN_TOKEN``)::

    python -m rl_loop.promote status   --store sqlite:///.cache/flywheel/traffic.db
    python -m rl_loop.promote publish  --store URL --gateway URL --replica URL \
        --checkpoint NEW_DIR [--previous SERVED_DIR]
    python -m rl_loop.promote rollback --store URL --gateway URL --replica URL [--replica URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rl_loop.model_registry import (
    TaintedCheckpoint,
    list_checkpoints,
    record_checkpoint,
    refuse_tainted,
)
from serving.build import read_version
from serving.hotswap import HotSwapConfig, SwapReport, publish_weights
from serving.names import ADMIN_TOKEN_ENV
from serving.swap_checks import (
    add_probe_arguments,
    add_timeout_arguments,
    timeout_overrides,
    tolerance_from,
)
from traffic.store import ModelVersionRecord, StoreBackend, StoreConfig, open_store
from traffic.store.forgetting import tainted_by


class PromotionError(Exception):
    """Nothing to promote or roll back to; the message says what is missing."""


async def promote(
    store: StoreBackend,
    checkpoint: Path,
    previous: Path,
    replicas: Sequence[str],
    config: HotSwapConfig,
) -> SwapReport:
    """Publish ``checkpoint`` (replicas serve ``previous`` now) and record the outcome;
    ``TaintedCheckpoint`` (nothing published) when it learned from a forgotten record."""
    await refuse_tainted(store, checkpoint)
    await record_checkpoint(store, checkpoint, "candidate")
    report = await publish_weights(checkpoint, previous, replicas, config)
    if report.ok:
        await record_checkpoint(store, previous, "retired")
        await record_checkpoint(store, checkpoint, "promoted")
    else:
        await record_checkpoint(store, checkpoint, "rejected")
    return report


async def served_version(store: StoreBackend) -> ModelVersionRecord | None:
    """The newest ``promoted`` version (what the replicas serve, per the record)."""
    promoted = await list_checkpoints(store, status="promoted")
    return max(promoted, key=lambda r: r.created_at) if promoted else None


async def rollback(
    store: StoreBackend, replicas: Sequence[str], config: HotSwapConfig
) -> tuple[str, str, SwapReport]:
    """Replace the served version by the one it replaced; returns (from, to, report)."""
    current = await served_version(store)
    if current is None:
        raise PromotionError("no promoted version in the store: nothing to roll back")
    candidates = await list_checkpoints(store, status="retired")
    on_disk = await asyncio.to_thread(lambda: {r.id for r in candidates if Path(r.path).is_dir()})
    retired = [
        r
        for r in candidates
        if r.id in on_disk and r.id != current.id and not await tainted_by(store, r.id)
    ]
    if not retired:
        raise PromotionError(f"no retired version with its files to go back to from {current.id}")
    by_id = {r.id: r for r in retired}
    target = by_id.get(current.parent or "") or max(retired, key=lambda r: r.created_at)
    report = await publish_weights(Path(target.path), Path(current.path), replicas, config)
    if report.ok:
        await record_checkpoint(store, Path(current.path), "rejected")
        await record_checkpoint(store, Path(target.path), "promoted")
    return current.id, target.id, report


def _print_report(report: SwapReport) -> None:
    for step in report.replicas:
        probe = step.probe
        figures = (
            f"probe mean {probe.mean_abs_diff:.4f} max {probe.max_abs_diff:.4f}" if probe else ""
        )
        print(
            f"  {step.replica}: {step.outcome} in {step.seconds:.2f}s {figures} {step.error or ''}"
        )
    state = f"rolled back to {report.previous_version}" if report.rolled_back else "published"
    print(f"{report.version}: {state} in {report.seconds:.2f}s")


async def _main(args: argparse.Namespace) -> int:
    store = open_store(StoreConfig(url=args.store))
    await store.connect()
    try:
        if args.command == "status":
            for r in await list_checkpoints(store):
                print(f"{r.id:<24} {r.status:<10} parent={r.parent} {r.path}")
            return 0
        token = os.environ.get(ADMIN_TOKEN_ENV)
        if not token:
            print(f"set {ADMIN_TOKEN_ENV} to the gateway's admin token", file=sys.stderr)
            return 2
        config = HotSwapConfig(
            gateway_url=args.gateway,
            admin_token=token,
            target=args.target,
            tolerance=tolerance_from(args),
            **timeout_overrides(args),
        )
        if args.command == "rollback":
            old, new, report = await rollback(store, args.replica, config)
            print(f"rollback {old} -> {new}")
        else:
            previous = args.previous
            if previous is None:
                current = await served_version(store)
                if current is None:
                    print("no promoted version recorded: pass --previous", file=sys.stderr)
                    return 2
                previous = Path(current.path)
            read_version(args.checkpoint)  # fail early on a directory that is no checkpoint
            report = await promote(store, args.checkpoint, previous, args.replica, config)
        _print_report(report)
        return 0 if report.ok else 1
    finally:
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_loop.promote", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "publish", "rollback"):
        p = sub.add_parser(name)
        p.add_argument(
            "--store", required=True, help="Traffic store URL (sqlite:///... or postgresql://...)."
        )
        if name == "status":
            continue
        p.add_argument("--gateway", required=True, help="Gateway base URL (admin API).")
        p.add_argument("--replica", action="append", required=True, help="Replica base URL.")
        p.add_argument("--target", default=HotSwapConfig.model_fields["target"].default)
        add_probe_arguments(p)
        add_timeout_arguments(p)
        if name == "publish":
            p.add_argument("--checkpoint", type=Path, required=True)
            p.add_argument("--previous", type=Path, default=None, help="Default: the promoted one.")
    try:
        return asyncio.run(_main(parser.parse_args(argv)))
    except (PromotionError, TaintedCheckpoint) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
