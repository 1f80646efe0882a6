"""`switchyard traffic retention`: delete the traffic past its window; `retention-window`: the
windows of keys and teams.

    switchyard traffic retention --config switchyard.yaml [--dry-run] [--export-root runs/exports]
    switchyard traffic retention --store URL --default-days 30 --spool-dir .cache/spool
    switchyard traffic retention-window --config switchyard.yaml                   (lists them)
    switchyard traffic retention-window --config switchyard.yaml --key KEY_ID --days 90
    switchyard traffic retention-window --config switchyard.yaml --team platform --forever
    switchyard traffic retention-window --config switchyard.yaml --key KEY_ID --inherit

``retention`` runs one pass (:mod:`traffic.retention`): the records past their key's window go
from the store (on PostgreSQL a day past every window is a partition drop), the spool and its
dead letters (``--config``'s ``store.spool_dir``, or each ``--spool-dir``) and the exported
datasets that list them; one audit entry (action ``traffic.retention``, actor ``retention``).
The default window is the config's ``store.retention_days`` (``--default-days`` wins; with
``--store`` and neither, the records of keys with no window are kept). Prints what it did as
JSON; exit status 1 when something is left (a busy spool segment, an export whose manifest
could not say, another pass running): run it again.

``retention-window`` gives a key or a team its own window (``--days N``, ``--forever``) or
takes it back (``--inherit``), logged as ``retention.window``; with neither, it lists the
default, each team's window and each key's with where it comes from.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from gateway.admin.forget_cli import cli_actor
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.store_args import (
    add_erase_args,
    add_store_args,
    erase_places,
    store_config,
    with_store,
)
from gateway.auth.consent import check_consent
from traffic.retention import RetentionReport, retention_pass
from traffic.store import StoreBackend
from traffic.store.console_queries import record_change
from traffic.store.records import ChangeRecord
from traffic.store.retention_windows import (
    TEAM_PREFIX,
    clear_window,
    key_subject,
    resolve_windows,
    set_window,
    stored_windows,
    team_subject,
)

WINDOW_ACTION = "retention.window"


def _default_days(args: argparse.Namespace) -> int | None:
    if args.default_days is not None:
        return int(args.default_days)
    return store_config(args).retention_days if args.config else None


def cmd_retention(args: argparse.Namespace) -> int:
    spool_dirs, export_roots = erase_places(args)
    report: RetentionReport = asyncio.run(
        with_store(
            args,
            lambda store: retention_pass(
                store,
                _default_days(args),
                dry_run=args.dry_run,
                spool_dirs=spool_dirs,
                export_roots=export_roots,
                legacy=LIVE_TRANSLATOR,
            ),
        )
    )
    print(json.dumps({"retention_id": report.retention_id, **report.detail()}, indent=2))
    left = report.busy or report.spool.busy or report.exports.unknown
    if left:
        print("not everything could be done (see busy / unknown): run again", file=sys.stderr)
    return 1 if left else 0


async def _listing(store: StoreBackend, default: int | None) -> dict[str, Any]:
    own = {w.subject: w.days for w in await stored_windows(store)}
    windows = await resolve_windows(store, default)
    keys = {}
    for key in await store.list_api_keys():
        team = team_subject(key.team_id) if key.team_id else None
        source = "own" if key_subject(key.id) in own else "team" if team in own else "default"
        keys[key.id] = {"days": windows.of(key.id), "from": source, "team_id": key.team_id}
    teams = {s.removeprefix(TEAM_PREFIX): d for s, d in own.items() if s.startswith(TEAM_PREFIX)}
    return {"default": default, "teams": teams, "keys": keys}


async def _set(store: StoreBackend, args: argparse.Namespace) -> dict[str, Any]:
    if args.key is not None:
        if await store.get_api_key(args.key) is None:
            raise SystemExit(f"retention-window: no key {args.key}")
        subject = key_subject(args.key)
    else:
        try:
            check_consent(args.team, None)
        except ValueError as exc:
            raise SystemExit(f"retention-window: {exc}") from exc
        subject = team_subject(args.team)
    before = {w.subject: w.days for w in await stored_windows(store)}
    if args.inherit:
        await clear_window(store, subject)
        after: dict[str, Any] = {"inherit": True}
    else:
        try:
            record = await set_window(store, subject, None if args.forever else args.days)
        except ValueError as exc:
            raise SystemExit(f"retention-window: {exc}") from exc
        after = {"days": record.days}
    was = {"days": before[subject]} if subject in before else {"inherit": True}
    detail = {**after, "before": was}
    await record_change(
        store,
        ChangeRecord(
            actor=args.actor or cli_actor(), action=WINDOW_ACTION, subject=subject, detail=detail
        ),
    )
    return {"subject": subject, **detail}


def cmd_window(args: argparse.Namespace) -> int:
    chosen = args.days is not None or args.forever or args.inherit
    if (args.key is None and args.team is None) == chosen:
        raise SystemExit("retention-window: --key or --team with --days N, --forever or --inherit")

    async def run(store: StoreBackend) -> dict[str, Any]:
        if chosen:
            return await _set(store, args)
        return await _listing(store, _default_days(args))

    print(json.dumps(asyncio.run(with_store(args, run)), indent=2))
    return 0


def add_parsers(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``retention`` and ``retention-window`` among ``switchyard traffic``'s verbs."""
    p = verbs.add_parser(
        "retention",
        help="delete the records past their key's retention window from the store, spool, dead "
        "letters and exports (on PostgreSQL, a day past every window is a partition drop)",
    )
    add_store_args(p)
    p.add_argument("--dry-run", action="store_true", help="say what would go; change nothing")
    p.add_argument(
        "--default-days",
        type=int,
        help="window of keys and teams with none of their own (default: the config's "
        "store.retention_days; none: kept forever)",
    )
    add_erase_args(p)
    p.set_defaults(verb_run=cmd_retention)

    w = verbs.add_parser(
        "retention-window", help="set a key's or a team's retention window, or list them all"
    )
    add_store_args(w)
    which = w.add_mutually_exclusive_group()
    which.add_argument("--key", help="an API key id")
    which.add_argument("--team", help="a team id")
    how = w.add_mutually_exclusive_group()
    how.add_argument("--days", type=int, help="keep its records this many days")
    how.add_argument("--forever", action="store_true", help="keep its records forever")
    how.add_argument("--inherit", action="store_true", help="take its team's or the default")
    w.add_argument(
        "--default-days", type=int, help="the default to list with (default: the config's)"
    )
    w.add_argument("--actor", help="who changes it, for the change log (default: cli:<user>)")
    w.set_defaults(verb_run=cmd_window)
