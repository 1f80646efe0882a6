"""`switchyard` command line: run the gateway, read the traffic record, export datasets.

    switchyard serve --config switchyard.yaml
    switchyard traffic summary --config .cache/demo/switchyard.yaml --by route_target,day
    switchyard traffic export --store URL --kind sft --out runs/sft --format jsonl,parquet \\
        --since 2026-11-01T00:00Z --route-target frontier-openai --has-feedback accepted
    switchyard keys create --config switchyard.yaml --name alice --rpm 600 --budget-usd 20
    switchyard fleet status --gateway http://any-gateway:8080

``--config FILE`` may replace ``--store``: the store that gateway config records into
(:mod:`gateway.store_args`). The summary's table fits the terminal (:mod:`gateway.summary_table`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from gateway.legacy_records import LIVE_TRANSLATOR, backfill_canonical
from gateway.store_args import add_store_args, store_config
from gateway.summary_table import print_summary
from traffic.export import ExportConfig, SplitConfig, export_from_store, summarize
from traffic.store import InferenceFilter, StoreBackend, open_store


def _query(args: argparse.Namespace) -> InferenceFilter:
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


async def _with_store(args: argparse.Namespace, fn: Any) -> Any:
    backend: StoreBackend = open_store(store_config(args))
    await backend.connect()
    try:
        return await fn(backend)
    finally:
        await backend.close()


def cmd_summary(args: argparse.Namespace) -> int:
    by = [b for b in (args.by or "").split(",") if b]
    rows = asyncio.run(_with_store(args, lambda b: summarize(b, _query(args), by)))
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
        _with_store(
            args,
            lambda b: export_from_store(
                b, _query(args), config, legacy=LIVE_TRANSLATOR, progress=True
            ),
        )
    )
    print(json.dumps(manifest.model_dump(mode="json")["counts"], indent=2))
    print(f"manifest: {Path(args.out) / 'manifest.json'}")
    return 0


def cmd_canonicalize(args: argparse.Namespace) -> int:
    counts = asyncio.run(_with_store(args, backfill_canonical))
    print(json.dumps(counts, indent=2))
    return 0


def _add_filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--since", help="ISO time with zone, inclusive")
    p.add_argument("--until", help="ISO time with zone, exclusive")
    p.add_argument("--route-target")
    p.add_argument("--served-model")
    p.add_argument("--api-key-id")
    p.add_argument("--endpoint")
    p.add_argument("--tag", action="append", help="key=value, repeatable (all must match)")
    p.add_argument("--has-feedback", help="a feedback kind, or 'any'")
    p.add_argument("--ok-only", action="store_true")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchyard", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", type=Path, required=True)
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument(
        "--workers",
        type=int,
        help="gateway processes on this host (default: one per core with a Redis fleet, else 1)",
    )
    traffic = sub.add_parser("traffic", help="read the traffic record").add_subparsers(
        dest="traffic_command", required=True
    )
    summary = traffic.add_parser("summary", help="counts, cost, latency, acceptance by group")
    add_store_args(summary)
    _add_filter_args(summary)
    summary.add_argument(
        "--by", help="comma list of route_target,served_model,api_key_id,endpoint,day"
    )
    summary.add_argument("--json", action="store_true")
    export = traffic.add_parser("export", help="export a training dataset")
    add_store_args(export)
    _add_filter_args(export)
    export.add_argument(
        "--kind",
        required=True,
        choices=["sft", "preference_trl", "preference_openai", "rl_prompts"],
    )
    export.add_argument("--out", required=True)
    export.add_argument("--format", default="jsonl", help="jsonl, parquet or jsonl,parquet")
    export.add_argument("--eval-fraction", type=float, default=SplitConfig().eval_fraction)
    export.add_argument("--no-scrub", action="store_true", help="keep PII (not recommended)")
    canonicalize = traffic.add_parser(
        "canonicalize",
        help="write the canonical conversation into Responses/Messages records from before it "
        "was recorded (migration 3), so every reader trains on what the model was sent",
    )
    add_store_args(canonicalize)
    sub.add_parser(
        "keys", help="API keys: create, list, revoke (see `switchyard keys -h`)", add_help=False
    )
    sub.add_parser(
        "fleet",
        help="the gateway fleet: status, reload, drain, undrain (see `switchyard fleet -h`)",
        add_help=False,
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["traffic"] and argv[1:2] in (["episode"], ["episode-export"]):
        from gateway.episode_cli import main as episode_main

        return episode_main(argv[1:])
    if argv[:1] == ["keys"]:
        from gateway.auth.cli import main as keys_main

        return int(keys_main(argv[1:]) or 0)
    if argv[:1] == ["fleet"]:
        from gateway.fleet.cli import main as fleet_main

        return fleet_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from gateway.serve import main as serve_main

        return serve_main(
            ["--config", str(args.config)]
            + (["--host", args.host] if args.host else [])
            + (["--port", str(args.port)] if args.port is not None else [])
            + (["--workers", str(args.workers)] if args.workers is not None else [])
        )
    if args.traffic_command == "summary":
        return cmd_summary(args)
    if args.traffic_command == "canonicalize":
        return cmd_canonicalize(args)
    return cmd_export(args)


if __name__ == "__main__":
    sys.exit(main())
