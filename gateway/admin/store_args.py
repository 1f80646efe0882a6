"""The traffic store a command line names (``--store URL`` or ``--config FILE``), and which of
its traffic (``--since``, ``--route-target``, ``--tag`` ...).

Every operator command that reads or writes the store (``switchyard traffic ...``,
``switchyard keys ...``) takes both. ``--config`` is the gateway's own YAML file (the one
``switchyard serve`` runs, e.g. the demo's ``.cache/demo/switchyard.yaml``): the command opens the
store that gateway records into. Only the store's own fields (:class:`traffic.store.StoreConfig`)
are read from its ``store`` section; the gateway's extras there (``enabled``, ``writer_process``)
say how the gateway records, not where. ``--store`` wins when both are given.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config import ConfigFileError, load_config
from traffic.store import InferenceFilter, StoreBackend, StoreConfig, open_store


def add_store_args(parser: argparse.ArgumentParser, *, subcommand: bool = False) -> None:
    """``--store URL`` and ``--config FILE`` on ``parser`` (both default to None).
    ``subcommand``: ``parser`` is a subcommand's and its parent has them too, so either place
    works (no default here, which would overwrite the parent's value)."""
    default = argparse.SUPPRESS if subcommand else None
    parser.add_argument(
        "--store", default=default, help="store URL (sqlite:///path or postgresql://...)"
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=default,
        help="gateway config (YAML) whose traffic store to use",
    )


def config_store(path: Path) -> StoreConfig:
    """The store the gateway config at ``path`` records into; ``SystemExit`` with the reason
    when the file cannot be read or validated, or records nothing (``store.enabled: false``)."""
    try:
        section = load_config(path).store
    except ConfigFileError as exc:
        raise SystemExit(str(exc)) from exc
    if not section.enabled:
        raise SystemExit(
            f"{path}: store.enabled is false (that gateway records nothing); give --store URL"
        )
    fields = section.model_dump(include=set(StoreConfig.model_fields))
    return StoreConfig.model_validate(fields)


def store_config(args: argparse.Namespace, default_url: str | None = None) -> StoreConfig:
    """The store ``args.store`` or ``args.config`` names; else ``default_url`` when given, else
    ``SystemExit`` asking for one (or naming what is wrong with the URL)."""
    if args.config and not args.store:
        return config_store(args.config)
    url = args.store or default_url
    if url is None:
        raise SystemExit("give --store URL or --config FILE")
    try:
        return StoreConfig(url=url)
    except ValidationError as exc:
        raise SystemExit(f"--store: {exc.errors()[0]['msg']}") from exc


def add_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", help="ISO time with zone, inclusive")
    p.add_argument("--until", help="ISO time with zone, exclusive")
    p.add_argument("--route-target")
    p.add_argument("--served-model")
    p.add_argument("--api-key-id")
    p.add_argument("--endpoint")
    p.add_argument("--tag", action="append", help="key=value, repeatable (all must match)")
    p.add_argument("--has-feedback", help="a feedback kind, or 'any'")
    p.add_argument("--ok-only", action="store_true")


def inference_filter(args: argparse.Namespace) -> InferenceFilter:
    tags = dict(t.split("=", 1) for t in (args.tag or []))
    return InferenceFilter(
        since=datetime.fromisoformat(args.since) if args.since else None,
        until=datetime.fromisoformat(args.until) if args.until else None,
        route_target=args.route_target,
        served_model=args.served_model,
        api_key_id=args.api_key_id,
        endpoint=args.endpoint,
        tags=tags,
        has_feedback=args.has_feedback,
        ok_only=args.ok_only,
    )


async def with_store(args: argparse.Namespace, fn: Any) -> Any:
    backend: StoreBackend = open_store(store_config(args))
    await backend.connect()
    try:
        return await fn(backend)
    finally:
        await backend.close()


def add_erase_args(parser: argparse.ArgumentParser) -> None:
    """``--spool-dir`` and ``--export-root`` (each repeatable): where else a deletion looks
    (``traffic.erase``: forget and retention)."""
    parser.add_argument(
        "--spool-dir",
        type=Path,
        action="append",
        help="a record spool to clean (repeatable; default: the store config's spool_dir)",
    )
    parser.add_argument(
        "--export-root",
        type=Path,
        action="append",
        help="a folder of exported datasets to search (repeatable; the lineage's linked "
        "folders are always searched)",
    )


def erase_places(args: argparse.Namespace) -> tuple[list[Path], list[Path]]:
    """The spool folders and export roots :func:`add_erase_args` read (the store config's
    spool folder when none was named)."""
    return args.spool_dir or [store_config(args).spool_dir], args.export_root or []
