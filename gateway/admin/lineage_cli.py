"""`switchyard traffic lineage`: the records that trained a checkpoint, and where a record went.

    switchyard traffic lineage --checkpoint sft-3f2a9c... --config switchyard.yaml > ids.txt
    switchyard traffic lineage --checkpoint sft-3f2a9c... --store URL --ancestors --verify
    switchyard traffic lineage --inference 0190c1e2-... --store URL --json

``--checkpoint`` prints the ids of the recorded inferences its datasets were built from, one a
line, on standard output, and each dataset (hash, kind, rows per split, where its files are) on
standard error; ``--ancestors`` adds the datasets of the checkpoints it was trained from;
``--verify`` rebuilds each exporter dataset from those rows as the store holds them now and
compares hashes (exit status 1 when one differs: a row deleted or changed since), with
``--labels`` the client-side labels its builder joined (the RL loop's ``labels.json``).
``--inference`` prints the datasets that list the record, with its split, the checkpoints
trained on them and their recorded descendants; a record deleted since is still found.
``--json`` prints either as one JSON document. What a lineage holds: ``traffic.export.lineage``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from tqdm import tqdm

from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.store_args import add_store_args, with_store
from traffic.client_labels import Labels, load_labels
from traffic.export.lineage_store import (
    CheckpointLineage,
    LinkedDataset,
    Rebuilt,
    checkpoint_lineage,
    rebuild_matches,
    record_uses,
)
from traffic.store import StoreBackend
from traffic.store.ids import is_uuid

_SHORT = 12  # characters of a dataset hash shown in text


def _dataset_line(d: LinkedDataset, rebuilt: Rebuilt | None, verify: bool) -> str:
    where = d.location or "built in memory"
    line = (
        f"dataset {d.record.id[:_SHORT]} {d.record.kind}: {d.lineage.row_count} rows (train "
        f"{d.lineage.train.count}, eval {d.lineage.eval.count}), {where}; checkpoint {d.checkpoint}"
    )
    if not verify:
        return line
    if rebuilt is None:
        return line + "; not rebuilt (not an exporter's dataset)"
    if rebuilt.matches:
        return line + "; rebuilt from the store: same hash"
    return line + f"; rebuilt: hash differs ({rebuilt.missing} rows no longer stored)"


async def _verify(
    store: StoreBackend, found: CheckpointLineage, labels: Labels
) -> dict[str, Rebuilt | None]:
    rebuilt: dict[str, Rebuilt | None] = {}
    for d in tqdm(found.datasets, desc="rebuild", unit="dataset"):
        if d.record.id not in rebuilt:  # one dataset may have trained several (--ancestors)
            rebuilt[d.record.id] = await rebuild_matches(
                store, d.record, legacy=LIVE_TRANSLATOR, labels=labels
            )
    return rebuilt


async def show_checkpoint(store: StoreBackend, args: argparse.Namespace) -> int:
    found = await checkpoint_lineage(store, args.checkpoint, ancestors=args.ancestors)
    if found is None:
        print(f"no checkpoint {args.checkpoint} in the model registry", file=sys.stderr)
        return 1
    labels = await asyncio.to_thread(load_labels, args.labels) if args.labels else {}
    rebuilt = await _verify(store, found, labels) if args.verify else {}
    ids = found.ids()
    if args.json:
        datasets = [
            {
                "id": d.record.id,
                "kind": d.record.kind,
                "checkpoint": d.checkpoint,
                "location": d.location,
                "train": d.lineage.train.count,
                "eval": d.lineage.eval.count,
                "config": d.record.config,
                **({"rebuilt": _rebuilt_json(rebuilt[d.record.id])} if args.verify else {}),
            }
            for d in found.datasets
        ]
        chain = [{"id": v.id, "status": v.status, "parent": v.parent} for v in found.checkpoints]
        print(json.dumps({"checkpoints": chain, "datasets": datasets, "records": ids}, indent=2))
    else:
        head = found.checkpoints[0]
        print(
            f"checkpoint {head.id} ({head.status}): {len(found.datasets)} datasets, "
            f"{len(ids)} records",
            file=sys.stderr,
        )
        for d in found.datasets:
            print(_dataset_line(d, rebuilt.get(d.record.id), args.verify), file=sys.stderr)
        if not found.datasets:
            print(
                "no dataset linked (trained before lineage, or outside the loop)", file=sys.stderr
            )
        sys.stdout.write("".join(f"{i}\n" for i in ids))
    return 1 if any(r is not None and not r.matches for r in rebuilt.values()) else 0


def _rebuilt_json(rebuilt: Rebuilt | None) -> dict[str, Any] | None:
    if rebuilt is None:
        return None
    return {"sha256": rebuilt.sha256, "matches": rebuilt.matches, "missing": rebuilt.missing}


async def show_inference(store: StoreBackend, args: argparse.Namespace) -> int:
    row_id = str(uuid.UUID(args.inference)) if is_uuid(args.inference) else args.inference
    uses = await record_uses(store, row_id, progress=True)
    status = {v.id: v.status for v in await store.list_model_versions()}
    if args.json:
        document = {
            "inference": row_id,
            "datasets": [
                {"id": d.id, "kind": d.kind, "split": part, "rows": d.row_count}
                for d, part in uses.datasets
            ],
            "checkpoints": [
                {"id": c, "status": status.get(c), "trained_on": ds}
                for c, ds in sorted(uses.trained.items())
            ],
            "inherited": [
                {"id": c, "status": status.get(c), "from": ancestor}
                for c, ancestor in uses.inherited.items()
            ],
        }
        print(json.dumps(document, indent=2))
        return 0
    print(
        f"inference {row_id}: in {len(uses.datasets)} datasets, trained "
        f"{len(uses.trained)} checkpoints ({len(uses.inherited)} more inherited it)"
    )
    for d, part in uses.datasets:
        print(f"dataset {d.id[:_SHORT]} {d.kind} ({part} split), {d.row_count} rows")
    for checkpoint, datasets in sorted(uses.trained.items()):
        short = ", ".join(i[:_SHORT] for i in datasets)
        print(f"checkpoint {checkpoint} ({status.get(checkpoint)}): trained on {short}")
    for checkpoint, ancestor in uses.inherited.items():
        print(f"checkpoint {checkpoint} ({status.get(checkpoint)}): inherited from {ancestor}")
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    show = show_checkpoint if args.checkpoint else show_inference
    result: int = asyncio.run(with_store(args, lambda b: show(b, args)))
    return result


def add_parsers(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lineage`` among ``switchyard traffic``'s verbs."""
    lineage = verbs.add_parser(
        "lineage",
        help="the records that trained a checkpoint, or the datasets and checkpoints that used "
        "a record",
    )
    add_store_args(lineage)
    which = lineage.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint", help="a model version id: list the records it learned from")
    which.add_argument("--inference", help="a record's id: list what used it")
    lineage.add_argument(
        "--ancestors",
        action="store_true",
        help="--checkpoint: add the datasets of the checkpoints it was trained from",
    )
    lineage.add_argument(
        "--verify",
        action="store_true",
        help="--checkpoint: rebuild each dataset from its records and compare hashes",
    )
    lineage.add_argument(
        "--labels",
        type=Path,
        help="--verify: the client-side labels the datasets' builder joined to the rows "
        "(a flywheel run's labels.json; traffic.client_labels)",
    )
    lineage.add_argument("--json", action="store_true", help="one JSON document on stdout")
    lineage.set_defaults(verb_run=cmd_lineage)
