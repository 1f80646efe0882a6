"""``switchyard traffic``: read the traffic record, export datasets.

    switchyard traffic summary --config .cache/demo/switchyard.yaml --by route_target,day
    switchyard traffic export --store URL --kind sft --out runs/sft --format jsonl,parquet \\
        --since 2026-11-01T00:00Z --route-target frontier-openai --has-feedback accepted
    switchyard traffic canonicalize --config switchyard.yaml
    switchyard traffic episode <episode id> --config switchyard.yaml   (gateway.admin.episode_cli)
    switchyard traffic lineage --checkpoint <version id> | --inference <id> --store URL
                                                                        (gateway.admin.lineage_cli)
    switchyard traffic forget --key <key id> | --team T | --inference <id> --config switchyard.yaml
                                                                        (gateway.admin.forget_cli)
    switchyard traffic retention [--dry-run] --config switchyard.yaml
    switchyard traffic retention-window --key <key id> | --team T --days N --config switchyard.yaml
                                                                     (gateway.admin.retention_cli)

``--config FILE`` may replace ``--store``: the store that gateway config records into
(:mod:`gateway.admin.store_args`). The summary's table fits the terminal
(:mod:`gateway.admin.summary_table`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from rich.console import Console

from gateway.admin.episode_cli import add_parsers as add_episode_parsers
from gateway.admin.forget_cli import add_parsers as add_forget_parsers
from gateway.admin.legacy_records import LIVE_TRANSLATOR, backfill_canonical
from gateway.admin.lineage_cli import add_parsers as add_lineage_parsers
from gateway.admin.retention_cli import add_parsers as add_retention_parsers
from gateway.admin.store_args import (
    add_filter_args,
    add_store_args,
    inference_filter,
    with_store,
)
from gateway.admin.subcommand import Subcommand
from gateway.admin.summary_table import print_summary
from traffic.export import ExportConfig, SplitConfig, export_from_store, summarize


def cmd_summary(args: argparse.Namespace) -> int:
    by = [b for b in (args.by or "").split(",") if b]
    rows = asyncio.run(with_store(args, lambda b: summarize(b, inference_filter(args), by)))
    if args.json:
        print(json.dumps(rows, default=str, indent=2))
        return 0
    print_summary(rows, by, Console())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    split = SplitConfig(eval_fraction=args.eval_fraction)
    config = ExportConfig(
        kind=args.kind,
        out_dir=Path(args.out),
        formats=tuple(args.format.split(",")),
        split=split,
        scrub_pii=not args.no_scrub,
    )
    manifest = asyncio.run(
        with_store(
            args,
            lambda b: export_from_store(
                b, inference_filter(args), config, legacy=LIVE_TRANSLATOR, progress=True
            ),
        )
    )
    print(json.dumps(manifest.model_dump(mode="json")["counts"], indent=2))
    print(f"manifest: {Path(args.out) / 'manifest.json'}")
    return 0


def cmd_canonicalize(args: argparse.Namespace) -> int:
    counts = asyncio.run(with_store(args, backfill_canonical))
    print(json.dumps(counts, indent=2))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``switchyard traffic <verb>``: summary, export, canonicalize, episode, episode-export,
    lineage, forget, retention, retention-window."""
    traffic = parser.add_subparsers(dest="verb", required=True)
    summary = traffic.add_parser("summary", help="counts, cost, latency, acceptance by group")
    add_store_args(summary)
    add_filter_args(summary)
    summary.add_argument(
        "--by", help="comma list of route_target,served_model,api_key_id,endpoint,day"
    )
    summary.add_argument("--json", action="store_true")
    summary.set_defaults(verb_run=cmd_summary)
    export = traffic.add_parser("export", help="export a training dataset")
    add_store_args(export)
    add_filter_args(export)
    export.add_argument(
        "--kind",
        required=True,
        choices=["sft", "preference_trl", "preference_openai", "rl_prompts"],
    )
    export.add_argument("--out", required=True)
    export.add_argument("--format", default="jsonl", help="jsonl, parquet or jsonl,parquet")
    export.add_argument("--eval-fraction", type=float, default=SplitConfig().eval_fraction)
    export.add_argument("--no-scrub", action="store_true", help="keep PII (not recommended)")
    export.set_defaults(verb_run=cmd_export)
    canonicalize = traffic.add_parser(
        "canonicalize",
        help="write the canonical conversation into Responses/Messages records from before it "
        "was recorded (migration 3), so every reader trains on what the model was sent",
    )
    add_store_args(canonicalize)
    canonicalize.set_defaults(verb_run=cmd_canonicalize)
    add_episode_parsers(traffic)
    add_lineage_parsers(traffic)
    add_forget_parsers(traffic)
    add_retention_parsers(traffic)


def run(args: argparse.Namespace) -> int:
    result: int = args.verb_run(args)
    return result


SUBCOMMAND = Subcommand(
    "traffic", "read the traffic record, export datasets, trace lineage", add_arguments, run
)
