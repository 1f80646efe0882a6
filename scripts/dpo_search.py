"""DPO recipe search (issue 17): which exported pairs and which preference loss move the gate.

    candidate  bench-train's SFT candidate (``loadtests.bench.train``: the flywheel's base model,
               RL then SFT on the same data; its cached run is reused)
    items      held-out tasks of the families with pairs, ``--heldout`` per family, answered
               greedily before and after DPO (the same items: paired, McNemar + 95% CI)
    pairs      made by the exporter from recorded feedback (``rl_loop.feedback_pairs``):
               edit      the candidate's greedy answer the verifier rejects, the reference
                         answer typed as the user's edit (what bench-train trained on before)
               onpolicy  ``--samples`` sampled answers per prompt (temperature 1), each accepted
                         or rejected by the verifier; the exporter pairs an accepted one with
                         rejected ones (``--pairs-per-prompt``)
    recipes    ``--recipe NAME:source=onpolicy,loss_type=ipo,beta=0.1,lr=1e-4,steps=40,lora=0``
               (keys: source, every ``DpoConfig`` field, lora=0|1); each trained from the
               candidate in process, one at a time

Every result is appended to ``<out>/results.jsonl``; the table goes to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from loadtests.bench.train import (
    BenchSettings,
    PairSource,
    base_model,
    families_with_pairs,
    heldout_items,
    job_file,
    recorded_answers,
    run,
    verify,
    write_data,
)
from rl_loop.config import GateConfig, LoopConfig
from rl_loop.evaluate import EvalItem, ModelEval, evaluate_policy
from rl_loop.feedback_pairs import export_pairs
from rl_loop.modeling import load_policy
from rl_loop.paired_eval import paired_changes
from rl_loop.train import PhaseData, train_candidate
from tasks.ide import sample_tasks

REPO = Path(__file__).resolve().parents[1]
GATE = GateConfig(max_new_tokens=64)


def sft_candidate(s: BenchSettings) -> Path:
    """bench-train's 1-process candidate (RL + SFT), trained once and reused."""
    marker = s.out / "sft_candidate.txt"
    if marker.exists() and Path(marker.read_text().strip()).exists():
        return Path(marker.read_text().strip())
    model = base_model(s.pretrain_steps)
    paths = write_data(s, model)
    data = {"sft_data": paths["sft"], "rollouts": paths["rollouts"]}
    result = run("new-1proc", job_file("new-1proc-0", model, s, **data))
    marker.write_text(result["checkpoint"])
    return Path(result["checkpoint"])


def pairs_of(
    args: argparse.Namespace, s: BenchSettings, checkpoint: Path, source: PairSource
) -> list[Any]:
    path = (
        s.out / f"pairs-{source}-{args.pair_prompts}-{args.samples}-{args.pairs_per_prompt}.jsonl"
    )
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines()]
    tasks = sample_tasks(args.pair_prompts, seed=13)
    started = time.perf_counter()
    answers = recorded_answers(checkpoint, tasks, source, args.samples)
    pairs = export_pairs(answers, max_pairs_per_prompt=args.pairs_per_prompt)
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    passed = sum(a.accepted for a in answers)
    print(
        f"pairs {source}: {len(pairs)} from {len(answers)} answers ({passed} accepted), "
        f"prompts with pairs {families_with_pairs(answers)}, "
        f"{time.perf_counter() - started:.0f} s",
        flush=True,
    )
    return pairs


def parse_recipe(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(":")
    return name, dict(kv.split("=", 1) for kv in rest.split(",") if kv)


def judge(policy: Any, version: str, items: list[EvalItem]) -> ModelEval:
    return evaluate_policy(policy, version, items, verify, GATE)


def train_recipe(checkpoint: Path, pairs: list[Any], opts: dict[str, str], out: Path) -> Any:
    dpo: dict[str, Any] = {"batch_size": 8, "steps": 40}
    lora = opts.pop("lora", "0") == "1"
    for k, v in opts.items():
        dpo[k] = v if k == "loss_type" else float(v)
    if "steps" in dpo:
        dpo["steps"] = int(dpo["steps"])
    if "batch_size" in dpo:
        dpo["batch_size"] = int(dpo["batch_size"])
    config = LoopConfig.model_validate(
        {
            "work_dir": str(out),
            "rl": {"enabled": False},
            "sft": {"steps": 0},
            "dpo": dpo,
            "engine": {"lora": {"r": 16, "alpha": 32} if lora else None},
        }
    )
    policy, stats = train_candidate(load_policy(checkpoint), PhaseData(pairs=pairs), config, out, 0)
    return policy, stats.get("dpo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python scripts/dpo_search.py", description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / ".cache" / "dpo-search")
    parser.add_argument("--heldout", type=int, default=64, help="Held-out items per family.")
    parser.add_argument("--families", default="exception_type,expression_type,return_type")
    parser.add_argument("--pair-prompts", type=int, default=400)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--pairs-per-prompt", type=int, default=2)
    parser.add_argument("--recipe", action="append", default=[])
    args = parser.parse_args(argv)
    torch.set_num_threads(os.cpu_count() or 1)
    s = BenchSettings(out=args.out)
    s.out.mkdir(parents=True, exist_ok=True)
    checkpoint = sft_candidate(s)
    items = heldout_items(args.heldout, args.families.split(","))
    started = time.perf_counter()
    before = judge(load_policy(checkpoint), "sft", items)
    print(f"sft candidate judged in {time.perf_counter() - started:.0f} s", flush=True)
    for text in args.recipe:
        name, opts = parse_recipe(text)
        source: PairSource = "edit" if opts.pop("source", "onpolicy") == "edit" else "onpolicy"
        pairs = pairs_of(args, s, checkpoint, source)
        started = time.perf_counter()
        policy, stats = train_recipe(checkpoint, pairs, dict(opts), s.out / f"run-{name}")
        after = judge(policy, name, items)
        changes = paired_changes(before, after)
        ppl = [round(before.ppl or 0, 2), round(after.ppl or 0, 2)]
        row = {
            "recipe": name,
            "source": source,
            "options": opts,
            "pairs": len(pairs),
            "steps": stats.steps if stats else 0,
            "ppl": ppl,
            "changes": {k: c.to_json() for k, c in changes.items()},
            "seconds": round(time.perf_counter() - started, 1),
        }
        with (s.out / "results.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"== {name} ({source}, {len(pairs)} pairs, {row['steps']} steps) {opts}", flush=True)
        for k, c in changes.items():
            print(f"   {k:<18} {c.to_text()}", flush=True)
        print(f"   ppl {ppl[0]} -> {ppl[1]}  ({row['seconds']} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
