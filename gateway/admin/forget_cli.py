"""`switchyard traffic forget`: delete a key's, team's, record's or time's traffic everywhere.

    switchyard traffic forget --key KEY_ID --config switchyard.yaml
    switchyard traffic forget --team platform --store URL --spool-dir .cache/spool \\
        --export-root runs/exports
    switchyard traffic forget --inference 0190c1e2-... --config switchyard.yaml
    switchyard traffic forget --before 2026-12-01T00:00:00+00:00 --config switchyard.yaml

Deletes the records with their feedback and shadow answers from the store, the spool's segments
and dead letters (``--config``'s ``store.spool_dir``, or each ``--spool-dir``), and the
exported dataset files that list them (those the lineage links, and under each
``--export-root``: rewritten without them, or deleted); marks the checkpoints trained on them
tainted; writes the audit entry (change log, action ``traffic.forget``). Prints what it did as
JSON; exit status 1 when something is left to do (a spool segment another process held, an
export whose manifest could not say): run it again. What and in which order:
``traffic.forget``.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from datetime import datetime

from pydantic import ValidationError

from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.store_args import add_erase_args, add_store_args, erase_places, with_store
from traffic.forget import ForgetReport, ForgetScope, forget


def cli_actor() -> str:
    """The audit entry's ``actor`` of a forget from the command line: ``cli:<user>``."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no user name for this uid
        return "cli"


def _aware_time(text: str) -> datetime:
    """An ISO 8601 time with its offset (a time without one would be read in the local zone)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give the time's offset (e.g. {text}+00:00)")
    return when


def report_json(report: ForgetReport) -> dict[str, object]:
    return {"forget_id": report.forget_id, "subject": report.subject, **report.detail()}


def cmd_forget(args: argparse.Namespace) -> int:
    try:
        scope = ForgetScope(
            key_id=args.key, team_id=args.team, inference_id=args.inference, before=args.before
        )
    except ValidationError as exc:
        raise SystemExit(f"forget: {exc.errors()[0]['msg']}") from exc
    spool_dirs, export_roots = erase_places(args)
    report: ForgetReport = asyncio.run(
        with_store(
            args,
            lambda store: forget(
                store,
                scope,
                actor=args.actor or cli_actor(),
                spool_dirs=spool_dirs,
                export_roots=export_roots,
                legacy=LIVE_TRANSLATOR,
            ),
        )
    )
    print(json.dumps(report_json(report), indent=2))
    left = report.spool.busy or report.exports.unknown
    if left:
        print("not everything could be forgotten (see busy / unknown): run again", file=sys.stderr)
    return 1 if left else 0


def add_parsers(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``forget`` among ``switchyard traffic``'s verbs."""
    p = verbs.add_parser(
        "forget",
        help="delete a key's, a team's or a record's traffic from the store, spool, dead "
        "letters and exports; taint the checkpoints trained on it",
    )
    add_store_args(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--key", help="an API key id: forget every record it made")
    which.add_argument("--team", help="a team id: forget every record of its keys")
    which.add_argument("--inference", help="one record's id")
    which.add_argument(
        "--before",
        type=_aware_time,
        help="an ISO 8601 time with its offset (2026-12-01T00:00:00+00:00): every record "
        "made before it",
    )
    add_erase_args(p)
    p.add_argument("--actor", help="who forgets, for the audit entry (default: cli:<user>)")
    p.set_defaults(verb_run=cmd_forget)
