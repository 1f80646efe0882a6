"""Manage API keys from a shell: ``switchyard keys (--config FILE | --store URL) COMMAND``.

    create --name N [--rpm R] [--tpm T] [--budget-usd B]   prints the key once, and its id
           [--team TEAM] [--training-use USE]
    list [--active] [--json]                               every key (no hashes, no keys)
    revoke KEY_ID                                          exit status 1 if unknown/revoked
    consent KEY_ID [--team TEAM | --no-team] [--training-use USE]    a key's team, consent
    team TEAM --training-use USE                           a team's consent (created if new)
    teams                                                  every team and its consent

``USE`` is ``allow``, ``redact``, ``deny`` or ``inherit`` (none of its own: a key takes its
team's, a team the config's ``auth.training_use``; :mod:`gateway.auth.consent`). Consent
changes go to the change log (actor ``cli``); gateways take them within ``auth.cache_ttl_s``.

``--config`` is the gateway's YAML file: its traffic store (:mod:`gateway.admin.store_args`) and its
``auth.key_prefix``. Without either, the traffic store's default URL (:mod:`traffic.store.config`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from typing import Any, cast

from gateway.admin.store_args import add_store_args, store_config
from gateway.admin.subcommand import Subcommand, run_alone
from gateway.auth.config import DEFAULT_KEY_PREFIX
from gateway.auth.consent import ConsentService, stored_training_use
from gateway.auth.keys import KeyService, public_view
from gateway.config import ConfigFileError, load_config
from traffic.store import TRAINING_USES, StoreBackend, StoreError, TrainingUse, open_store
from traffic.store.config import DEFAULT_URL
from traffic.store.console_queries import record_change
from traffic.store.records import ChangeRecord

CLI_ACTOR = "cli"  # the change log's actor of changes made with this command
INHERIT = "inherit"  # no setting of its own
USES = (*TRAINING_USES, INHERIT)
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
    c.add_argument("--team", default=None, help="the team it belongs to (default: none)")
    c.add_argument("--training-use", choices=USES, default=INHERIT, help="default: inherit")
    ls = sub.add_parser("list", help="list keys")
    ls.add_argument("--active", action="store_true", help="leave out revoked keys")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    r = sub.add_parser("revoke", help="revoke a key")
    r.add_argument("key_id")
    k = sub.add_parser("consent", help="set a key's team and/or consent")
    k.add_argument("key_id")
    team = k.add_mutually_exclusive_group()
    team.add_argument("--team", default=None, help="the team it belongs to")
    team.add_argument("--no-team", action="store_true", help="take it out of its team")
    k.add_argument("--training-use", choices=USES, default=None, help="default: unchanged")
    t = sub.add_parser("team", help="set a team's consent (created if new)")
    t.add_argument("team_id")
    t.add_argument("--training-use", choices=USES, required=True)
    ts = sub.add_parser("teams", help="list teams and their consent")
    for command in (c, ls, r, k, t, ts):
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
        if args.command in ("consent", "team", "teams"):
            return await _consent(store, args)
        if args.command == "create":
            record, plaintext = await keys.create(
                args.name,
                args.rpm,
                args.tpm,
                args.budget_usd,
                team_id=args.team,
                training_use=_use(args.training_use),
            )
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
            print("\t".join((*_COLUMNS, "budget_usd", "spent_usd", "team_id", "training_use")))
            for v in views:
                cells = [str(v[c]) if v[c] is not None else "-" for c in _COLUMNS]
                budget = f"{v['budget_usd']:.2f}" if v["budget_usd"] is not None else "-"
                consent = (v["team_id"] or "-", v["training_use"] or INHERIT)
                print("\t".join((*cells, budget, f"{v['spent_usd']:.4f}", *consent)))
            return 0
        if await keys.revoke(args.key_id):
            print(f"revoked {args.key_id}")
            return 0
        print(f"no active key with id {args.key_id}", file=sys.stderr)
        return 1
    finally:
        await store.close()


def _use(value: str | None) -> TrainingUse | None:
    """A ``--training-use`` value as a setting (``inherit``: none of its own)."""
    return None if value in (None, INHERIT) else cast(TrainingUse, value)


async def _consent(store: StoreBackend, args: argparse.Namespace) -> int:
    """``consent``, ``team`` and ``teams``; each change in the change log."""
    service = ConsentService(store)
    if args.command == "teams":
        for team in await service.teams():
            print(f"{team.id}\t{team.training_use or INHERIT}")
        return 0
    if args.command == "team":
        before = await store.get_team(args.team_id)
        team = await service.set_team(args.team_id, _use(args.training_use))
        previous = before.training_use if before is not None else None
        detail: dict[str, Any] = {"training_use": team.training_use, "before": previous}
        await _log(store, "team.consent", team.id, detail)
        print(f"team {team.id}: training_use {team.training_use or INHERIT}")
        return 0
    found = await store.get_api_key(args.key_id)
    if found is None:
        print(f"no key with id {args.key_id}", file=sys.stderr)
        return 1
    team_id = None if args.no_team else (args.team or found.team_id)
    own = _use(args.training_use) if args.training_use else stored_training_use(found.training_use)
    record = await service.set_key(args.key_id, team_id=team_id, training_use=own)
    assert record is not None
    detail = {
        "team_id": record.team_id,
        "training_use": record.training_use,
        "before": {"team_id": found.team_id, "training_use": found.training_use},
    }
    await _log(store, "key.consent", record.id, detail)
    use = record.training_use or INHERIT
    print(f"key {record.id}: team {record.team_id or '-'}, training_use {use}")
    return 0


async def _log(store: StoreBackend, action: str, subject: str, detail: dict[str, Any]) -> None:
    await record_change(
        store, ChangeRecord(actor=CLI_ACTOR, action=action, subject=subject, detail=detail)
    )


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_run(args))
    except ValueError as exc:  # a refused argument (bad URL, empty name, limit < 1)
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"store error: {exc}", file=sys.stderr)
        return 1


SUBCOMMAND = Subcommand(
    "keys", "API keys and teams: create, list, revoke, consent", add_arguments, run
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_alone(SUBCOMMAND, "switchyard keys", argv)


if __name__ == "__main__":
    sys.exit(main())
