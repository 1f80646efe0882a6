"""`switchyard traffic episode ...`: one agent episode rebuilt from the record, and exports.

    switchyard traffic episode cache-key:0f94a6... --store sqlite:///.cache/demo/traffic.db
    switchyard traffic episode agent-742c29... --config switchyard.yaml --json
    switchyard traffic episode-export --store URL --kind episode_sft --out runs/agent-sft \\
        --format jsonl,parquet --since 2026-11-01T00:00Z

``episode`` prints each step (route target and kind, served model, status, latency, cost, the
tool calls and their validity, the first line of each tool result), the verdict and the episode's
figures; ``--json`` prints what ``GET /admin/episodes/{id}`` answers. ``episode-export`` writes
every episode with an inference the filters select (``episode_sft``: TRL conversational with
tools; ``episode_rl``: per-step records and the terminal reward) and prints the counts. With
``--config`` a step is ``local`` when its target is a ``kind: vllm`` back-end of that config;
with ``--store`` alone, when its target does not start with ``frontier``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any, get_args

from rich.console import Console
from rich.table import Table
from rich.text import Text

from gateway.admin.episodes import route_kinds
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.store_args import (
    add_filter_args,
    add_store_args,
    inference_filter,
    with_store,
)
from gateway.config import load_config
from traffic.export import (
    TRAFFIC_QUERY,
    EpisodeExportConfig,
    RouteKinds,
    SplitConfig,
    episode_view,
    export_episodes_from_store,
    load_episode,
)
from traffic.export.episode_export import EpisodeKind

_CELL = 60
_FIELDS = ("#", "target", "model", "status", "ms", "cost $")  # never folded in the wide layout
_MIN_TEXT = 20  # the least an answer or tool result column gets in the wide layout
_CELL_EDGES = 3  # a column's padding (2) and its right border (1)


def _routes(args: argparse.Namespace) -> RouteKinds:
    return route_kinds(load_config(args.config)) if args.config else RouteKinds()


def _short(text: str | None, width: int = _CELL) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _answer_cell(step: dict[str, Any]) -> str:
    answer = step["answer"] or {}
    calls = answer.get("tool_calls") or []
    if not calls:
        return _short(answer.get("content")) or ("(no answer)" if not step["answer"] else "")
    checks = {c["id"]: c for c in step["tool_calls"]}
    cells = []
    for call in calls:
        fn = call["function"]
        check = checks.get(call["id"], {})
        mark = "" if check.get("valid", True) else f" [invalid: {check.get('problem')}]"
        cells.append(_short(f"{fn['name']}({fn['arguments']})") + mark)
    return "\n".join(cells)


def _step_cells(step: dict[str, Any]) -> dict[str, str]:
    cost = step["cost_usd"]
    return {
        "#": str(step["index"]),
        "kind": step["route_kind"],
        "target": f"{step['route_target']} ({step['route_kind']})",
        "model": step["served_model"],
        "status": str(step["status"]) + (f" {step['error']}" if step["error"] else ""),
        "ms": f"{step['latency_ms']:.1f}",
        "cost $": "" if cost is None else f"{cost:.6f}",
        "answer": _answer_cell(step),
        "tool result": "\n".join(_short(r.get("content")) for r in step["tool_results"]),
    }


def _stacked(cells: dict[str, str]) -> str:
    """The fields of a step, a line each, for the narrow layout's ``step`` column."""
    target = cells["target"].removesuffix(f" ({cells['kind']})")
    status, _, error = cells["status"].partition(" ")
    cost = f"${cells['cost $']}" if cells["cost $"] else "cost unknown"
    lines = [target, cells["model"], f"{cells['kind']}, status {status}", error]
    return "\n".join([*(line for line in lines if line), f"{cells['ms']} ms, {cost}"])


def _wide_fits(steps: list[dict[str, str]], width: int) -> bool:
    """Whether a column per field leaves the two free-text columns ``_MIN_TEXT`` each."""
    fixed = 0
    for column in _FIELDS:
        cells = [column, *(line for s in steps for line in s[column].splitlines())]
        fixed += max(map(len, cells)) + _CELL_EDGES
    return width - 1 - fixed - 2 * _CELL_EDGES >= 2 * _MIN_TEXT


def episode_table(view: dict[str, Any], width: int) -> Table:
    """The steps of ``view`` in ``width`` columns: a column per field where that leaves the
    answer and tool results room, else the fields stacked in one ``step`` column. Only the
    answer and tool results (free text, already shortened to a line) ever fold."""
    steps = [_step_cells(s) for s in view["steps"]]
    table = Table(title=f"episode {view['episode_id']}", show_lines=True)
    wide = _wide_fits(steps, width)
    fields = _FIELDS if wide else ("#", "step")
    for column in fields:
        table.add_column(column, no_wrap=column in _FIELDS, overflow="fold")
    for column in ("answer", "tool result"):
        table.add_column(column, ratio=1, overflow="fold", min_width=_MIN_TEXT // 2)
    for cells in steps:
        shown = [cells[c] for c in _FIELDS] if wide else [cells["#"], _stacked(cells)]
        # Text, not markup: an answer's "[...]" is the model's, not a style.
        table.add_row(*(Text(c) for c in (*shown, cells["answer"], cells["tool result"])))
    return table


def print_episode(view: dict[str, Any], console: Console) -> None:
    """The episode as a table of steps, with its verdict and figures."""
    summary = view["summary"]
    console.print(episode_table(view, console.width))
    verdict = view["verdict"] or "none"
    reason = f": {view['verdict_reason']}" if view["verdict_reason"] else ""
    console.print(f"verdict: {verdict}{reason}")
    cost = summary["cost_usd"]
    console.print(
        f"steps {summary['steps']} (local {summary['local_steps']}, frontier "
        f"{summary['frontier_steps']}, failed {summary['failed_steps']}); tool calls "
        f"{summary['tool_calls']} (invalid {summary['invalid_tool_calls']}); "
        f"latency {summary['latency_ms']:.1f} ms; cost "
        + ("unknown" if cost is None else f"${cost:.6f}")
    )
    if view["problems"]:
        console.print("problems: " + "; ".join(view["problems"]))


def cmd_episode(args: argparse.Namespace) -> int:
    routes = _routes(args)
    episode = asyncio.run(
        with_store(
            args,
            lambda b: load_episode(b, args.episode_id, legacy=LIVE_TRANSLATOR, routes=routes),
        )
    )
    if episode is None:
        print(f"no inference in episode {args.episode_id}")
        return 1
    view = episode_view(episode)
    if args.json:
        print(json.dumps(view, indent=2, default=str))
    else:
        print_episode(view, Console())
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    config = EpisodeExportConfig(
        kind=args.kind,
        out_dir=Path(args.out),
        formats=tuple(args.format.split(",")),
        split=SplitConfig(eval_fraction=args.eval_fraction),
        scrub_pii=not args.no_scrub,
        sft_route=args.sft_route,
    )
    query = inference_filter(args)
    routes = _routes(args)
    manifest = asyncio.run(
        with_store(
            args,
            lambda b: export_episodes_from_store(
                b,
                query,
                config,
                filters=TRAFFIC_QUERY.dump_python(query, mode="json"),
                legacy=LIVE_TRANSLATOR,
                routes=routes,
            ),
        )
    )
    print(json.dumps(manifest.model_dump(mode="json")["counts"], indent=2))
    print(f"manifest: {Path(args.out) / 'manifest.json'}")
    return 0


def add_parsers(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``episode`` and ``episode-export`` among ``switchyard traffic``'s verbs."""
    show = verbs.add_parser("episode", help="one episode's whole trajectory")
    show.add_argument("episode_id")
    add_store_args(show)
    show.add_argument("--json", action="store_true", help="the admin API's JSON")
    show.set_defaults(verb_run=cmd_episode)
    export = verbs.add_parser("episode-export", help="export episodes as SFT or RL data")
    add_store_args(export)
    add_filter_args(export)
    export.add_argument("--kind", required=True, choices=get_args(EpisodeKind))
    export.add_argument("--out", required=True)
    export.add_argument("--format", default="jsonl", help="jsonl, parquet or jsonl,parquet")
    export.add_argument("--eval-fraction", type=float, default=SplitConfig().eval_fraction)
    export.add_argument("--no-scrub", action="store_true", help="keep PII (not recommended)")
    export.add_argument(
        "--sft-route",
        choices=("any", "frontier"),
        default=EpisodeExportConfig.model_fields["sft_route"].default,
        help="episode_sft: any accepted episode, or only those the frontier served",
    )
    export.set_defaults(verb_run=cmd_export)
