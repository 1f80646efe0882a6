"""Manage API keys from a shell: ``switchyard keys (--config FILE | --store URL) COMMAND``.

    create --name N [--rpm R] [--tpm T] [--budget-usd B]   prints the key once, and its id
    list [--active] [--json]                               every key (no hashes, no keys)
    revoke KEY_ID                                          exit status 1 if unknown/revoked

``--config`` is the gateway's YAML file: its traffic store (:mod:`gateway.admin.store_args`) and its
``auth.key_prefix``. Without either, the traffic store's default URL (:mod:`traffic.store.config`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence

from gateway.admin.store_args import add_store_args, store_config
from gateway.admin.subcommand import Subcommand, run_alone
from gateway.auth.config import DEFAULT_KEY_PREFIX
from gateway.auth.keys import KeyService, public_view
from gateway.config import ConfigFileError, load_config
from traffic.store import StoreError, open_store
from traffic.store.config import DEFAULT_URL

_COLUMNS = ("id", "name", "prefix", "created_at", "revoked_at", "rpm_limit", "tpm_limit")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``switchyard keys create|list|revoke``; ``--config``/``--store`` before or after the
    verb."""
    add_store_args(p)
    p.add_argument(
        "--key-prefix",
        help=f"start of created keys (default: the config's auth.key_prefix, else "
        f"{DEFAULT_KEY_PREFIX})",
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("create", help="create a key and print it (shown only this once)")
    c.add_argument("--name", required=True)
    c.add_argument("--rpm", type=int, default=None, help="requests per minute (default: none)")
    c.add_argument("--tpm", type=int, default=None, help="tokens per minute (default: none)")
    c.add_argument("--budget-usd", type=float, default=None, help="USD budget (default: none)")
    ls = sub.add_parser("list", help="list keys")
    ls.add_argument("--active", action="store_true", help="leave out revoked keys")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    r = sub.add_parser("revoke", help="revoke a key")
    r.add_argument("key_id")
    for command in (c, ls, r):
        add_store_args(command, subcommand=True)


def _key_prefix(args: argparse.Namespace) -> str:
    if args.key_prefix:
        return str(args.key_prefix)
    if args.config:
        try:
            return load_config(args.config).auth.key_prefix
        except ConfigFileError as exc:
            raise SystemExit(str(exc)) from exc
    return DEFAULT_KEY_PREFIX


async def _run(args: argparse.Namespace) -> int:
    store = open_store(store_config(args, default_url=DEFAULT_URL))
    await store.connect()
    try:
        keys = KeyService(store, key_prefix=_key_prefix(args))
        if args.command == "create":
            record, plaintext = await keys.create(args.name, args.rpm, args.tpm, args.budget_usd)
            print(f"id:  {record.id}")
            print(f"key: {plaintext}")
            print("Store the key now: it is not kept and cannot be shown again.", file=sys.stderr)
            return 0
        if args.command == "list":
            records = await keys.list(include_revoked=not args.active)
            views = [public_view(r) for r in records]
            if args.json:
                for v in views:
                    print(json.dumps(v))
                return 0
            print("\t".join((*_COLUMNS, "budget_usd", "spent_usd")))
            for v in views:
                cells = [str(v[c]) if v[c] is not None else "-" for c in _COLUMNS]
                budget = f"{v['budget_usd']:.2f}" if v["budget_usd"] is not None else "-"
                print("\t".join((*cells, budget, f"{v['spent_usd']:.4f}")))
            return 0
        if await keys.revoke(args.key_id):
            print(f"revoked {args.key_id}")
            return 0
        print(f"no active key with id {args.key_id}", file=sys.stderr)
        return 1
    finally:
        await store.close()


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except ValueError as exc:  # a refused argument (bad URL, empty name, limit < 1)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"store error: {exc}", file=sys.stderr)
        return 1


SUBCOMMAND = Subcommand("keys", "API keys: create, list, revoke", add_arguments, run)


def main(argv: Sequence[str] | None = None) -> int:
    return run_alone(SUBCOMMAND, "switchyard keys", argv)


if __name__ == "__main__":
    sys.exit(main())
