"""``make bench-train``: the same SFT and RL data through the previous hand-written loop
(``rl_loop.reference_loop``) and the new stack (``rl_loop.train`` on TRL + accelerate), on this
machine, in one run; then DPO on preference pairs on top of the new stack's candidate.

    model    the flywheel's base model (the tiny Qwen3-MoE base-trained on stdlib code; cached)
    data     the task families (tasks.ide): SFT on reference answers of train-split tasks;
             RL rollouts: per prompt, samples of the base model (temperature 1, in process: the
             trainer is its own rollout engine here, so IS ratios start at 1) and the reference
             answer (the base model fails every task, so without it no group carries signal),
             rewarded by the verifier;
             preference pairs made by the exporter from recorded feedback
             (``rl_loop.feedback_pairs``), ``--pair-source``: ``onpolicy`` (default), the SFT
             candidate's sampled answers accepted or rejected by the verifier, an accepted one
             chosen over rejected ones; ``edit``, its greedy answer the verifier rejects with
             the reference answer (the user's edit) chosen over it
    runs     each a fresh process on the same job: previous loop; new stack, 1 process; new
             stack, 2 processes (accelerate launch, gloo DDP); repeated ``--repeats`` times,
             alternating; the best tokens/s of the repeats is the figure (the machine is
             shared: other work only ever slows a run down), the 1-minute load average at each
             run's start is recorded beside it
    measure  training tokens/s per phase (real tokens of the batches / the phase's training
             time), peak RSS per process, the loss after N steps, and the gate (held-out tasks,
             every family) of each candidate against the base model
    dpo      the new stack's candidate + DPO on the pairs (the ``dpo`` defaults of
             ``rl_loop.config``): held-out preference margins, the gate, and per family with
             pairs the accept rate on ``dpo_heldout_per_family`` held-out items before and
             after, paired (``rl_loop.paired_eval``: McNemar p, 95% CI of the change)

The table goes to stdout and ``<out>/bench_train.json``; the last line is one JSON with the
same-run ratios (targets: new stack tokens/s >= 0.8x the previous loop, the same gate result;
2-process DDP reaches the 1-process loss within ``DDP_LOSS_TOLERANCE``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field

from rl_loop.config import GateConfig
from rl_loop.evaluate import AnswerCache, EvalItem, ModelEval, evaluate_policy, gate
from rl_loop.feedback_pairs import RecordedAnswer, export_pairs
from rl_loop.modeling import Encoded, generate, load_policy
from rl_loop.paired_eval import paired_changes
from rl_loop.reference_loop import run_job as run_reference_job
from rl_loop.rewards import combine, degenerate_reward, verifier_reward
from rl_loop.rollouts import Rollout
from rl_loop.scoring import label_logprobs, make_batch
from rl_loop.train import load_job, write_rollouts
from rl_loop.trainers.dpo import preference_margins
from serving.base_checkpoints import base_training_config, ensure_trained
from serving.build import ensure_demo_model
from serving.copy_curriculum import COPY_RECIPE
from serving.replica import find_free_port
from tasks.ide import FAMILIES, sample_tasks, task_from_id, verify_reply
from tasks.ide.task import HELDOUT_SEED_START, Task

REPO = Path(__file__).resolve().parents[2]
CPU_DDP = REPO / "rl_loop" / "configs" / "accelerate" / "cpu-ddp.yaml"
DDP_LOSS_TOLERANCE = 0.02  # relative gap of the last losses, 2 vs 1 process
SPEED_TARGET = 0.8  # new stack tokens/s over the previous loop's
PairSource = Literal["onpolicy", "edit"]


class BenchSettings(BaseModel):
    """One bench-train run; each default is defined here once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    out: Path = Field(default=REPO / ".cache" / "bench-train", description="Output folder.")
    pretrain_steps: int = Field(default=1200, ge=0, description="The flywheel's base model.")
    sft_examples: int = Field(default=480, ge=16)
    sft_steps: int = Field(default=120, ge=1)
    rl_prompts: int = Field(default=16, ge=2)
    samples_per_prompt: int = Field(default=4, ge=2)
    rl_steps: int = Field(default=8, ge=1)
    pair_prompts: int = Field(
        default=200,
        ge=8,
        description="Train tasks the SFT candidate answers (pairs come from them).",
    )
    pair_source: PairSource = Field(
        default="onpolicy",
        description="onpolicy: sampled answers accepted or rejected; edit: greedy answers "
        "rejected and edited into the reference answer.",
    )
    pair_samples: int = Field(default=8, ge=2, description="Sampled answers per prompt (onpolicy).")
    pairs_per_prompt: int = Field(
        default=2, ge=1, description="The exporter's max_pairs_per_prompt."
    )
    dpo_steps: int = Field(default=40, ge=1)
    heldout_per_family: int = Field(default=8, ge=1, description="Gate items per family.")
    dpo_heldout_per_family: int = Field(
        default=64, ge=1, description="Held-out items per family with pairs, DPO's paired test."
    )
    min_family_pairs: int = Field(
        default=8, ge=1, description="A family with fewer prompts with pairs is not measured."
    )
    repeats: int = Field(default=3, ge=1, description="Runs of each variant (best of).")


def verify(tags: Any, answer: str) -> tuple[bool, str]:
    verdict = verify_reply(task_from_id(str(tags["task_id"])), answer)
    return verdict.passed, verdict.feedback


def base_model(steps: int) -> Path:
    """The flywheel's base model (``scripts/flywheel.py``: its config, so the cache is shared)."""
    init = ensure_demo_model(REPO / ".cache")
    if steps == 0:
        return init
    return ensure_trained(init, init.parent, base_training_config(steps, 128, COPY_RECIPE))


def write_data(s: BenchSettings, model: Path) -> dict[str, Path]:
    """SFT records and rollouts as files."""
    s.out.mkdir(parents=True, exist_ok=True)
    paths = {k: s.out / f"{k}.jsonl" for k in ("sft", "rollouts")}
    with paths["sft"].open("w") as f:
        for t in sample_tasks(s.sft_examples, seed=11):
            turn = {"role": "assistant", "content": t.reference_reply}
            f.write(json.dumps({"messages": [*t.messages(), turn]}) + "\n")
    policy = load_policy(model)
    rollouts: list[Rollout] = []
    for g, task in enumerate(sample_tasks(s.rl_prompts, seed=12)):
        prompt = policy.encode_prompt(task.messages())
        outs = generate(
            policy,
            [prompt] * (s.samples_per_prompt - 1),
            max_new_tokens=64,
            temperature=1.0,
            seed=g,
        )
        outs.append(policy.encode_completion(task.reference_reply))
        batch = make_batch([Encoded(prompt, c) for c in outs], policy.pad_id, policy.device)
        with torch.no_grad():
            logp = label_logprobs(policy.model, batch)
        texts = [policy.decode(c) for c in outs]
        rewards = combine(
            [(verifier_reward, 1.0), (degenerate_reward, 1.0)],
            texts,
            tags=[task.labels()] * len(texts),
            verify=verify,
            prompts=[task.user_prompt()] * len(texts),
        )
        for i, (c, r) in enumerate(zip(outs, rewards, strict=True)):
            if c:
                engine = tuple(logp[i][batch.mask[i]].tolist())
                rollouts.append(Rollout(prompt, tuple(c), engine, task.task_id, r))
    write_rollouts(paths["rollouts"], rollouts)
    return paths


def job_file(name: str, model: Path, s: BenchSettings, **data: Any) -> Path:
    """A job for ``rl_loop.train``, its outputs (``<out>/<name>``) cleared first."""
    shutil.rmtree(s.out / name, ignore_errors=True)
    loop = {
        "work_dir": str(s.out / name),
        "rl": {"steps": s.rl_steps, "batch_size": 16, "lr": 2e-4},
        "sft": {"steps": s.sft_steps, "batch_size": 16, "lr": 1e-3, "replay_windows": 16},
        "dpo": {"steps": s.dpo_steps if "preference_data" in data else 0, "batch_size": 8},
    }
    if "preference_data" in data:
        loop.update(rl={"enabled": False}, sft={"steps": 0})
    job = {"model": str(model), "loop": loop, **{k: str(v) for k, v in data.items()}}
    path = s.out / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def run(variant: str, job: Path) -> dict[str, Any]:
    """One variant in a fresh process; its ``result.json``."""
    if variant == "previous":
        command = [sys.executable, "-m", "loadtests.bench.train", "--reference-job", str(job)]
    elif variant == "new-1proc":
        command = [sys.executable, "-m", "rl_loop.train", "--config", str(job)]
    else:
        command = [
            sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CPU_DDP),
            "--num_processes", "2", "--main_process_port", str(find_free_port()),
            "-m", "rl_loop.train", "--config", str(job),
        ]  # fmt: skip
    load = os.getloadavg()[0]
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=os.environ)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads((load_job(job).loop.work_dir / "result.json").read_text())
    result["wall_s"] = round(time.perf_counter() - started, 1)
    result["load_at_start"] = round(load, 2)
    return result


def heldout_items(per_family: int, families: list[str] | None = None) -> list[EvalItem]:
    """Held-out tasks of ``families`` (default every family; never trained on), as the
    flywheel's gate has them; the first ``n`` of a family are the same for any larger count."""
    items = []
    for name in sorted(FAMILIES) if families is None else families:
        for i in range(per_family):
            task = FAMILIES[name].generate(HELDOUT_SEED_START + 7919 * i + 1)
            items.append(EvalItem(task.messages(), task.labels(), "heldout"))
    return items


def judge(checkpoint: Path, items: list[EvalItem], config: GateConfig) -> ModelEval:
    return evaluate_policy(load_policy(checkpoint), checkpoint.name, items, verify, config)


def phase_figures(results: list[dict[str, Any]], phase: str) -> dict[str, Any]:
    """Over the repeats: the best and the median tokens/s of the phase, its last loss."""
    speeds = [r["phases"][phase]["tokens"] / r["phases"][phase]["seconds"] for r in results]
    return {
        "tokens_per_s": round(max(speeds), 1),
        "tokens_per_s_median": round(statistics.median(speeds), 1),
        "last_loss": round(statistics.median(r["phases"][phase]["last_loss"] for r in results), 4),
        "steps": results[0]["phases"][phase]["steps"],
    }


def bench(s: BenchSettings) -> dict[str, Any]:
    torch.set_num_threads(os.cpu_count() or 1)
    model = base_model(s.pretrain_steps)
    paths = write_data(s, model)
    data = {"sft_data": paths["sft"], "rollouts": paths["rollouts"]}
    runs: dict[str, list[dict[str, Any]]] = {"previous": [], "new-1proc": [], "new-2proc": []}
    for r in range(s.repeats):
        for variant in runs:
            runs[variant].append(run(variant, job_file(f"{variant}-{r}", model, s, **data)))
    gate_config = GateConfig(max_new_tokens=64)
    items = heldout_items(s.heldout_per_family)
    base_eval = judge(model, items, gate_config)
    table: dict[str, Any] = {}
    for variant, results in runs.items():
        candidate = judge(Path(results[0]["checkpoint"]), items, gate_config)
        report = gate(base_eval, candidate, gate_config)
        table[variant] = {
            "sft": phase_figures(results, "sft"),
            "rl": phase_figures(results, "rl"),
            "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in results),
            "wall_s": statistics.median(r["wall_s"] for r in results),
            "load_at_start": [r["load_at_start"] for r in results],
            "gate_passed": report.passed,
            "accept_rate": round(candidate.overall.accept_rate, 3),
            "ppl": round(candidate.ppl or 0.0, 2),
        }
    table["base"] = {"accept_rate": round(base_eval.overall.accept_rate, 3)}
    table["dpo"] = dpo_effect(s, Path(runs["new-1proc"][0]["checkpoint"]), items)
    return {"settings": json.loads(s.model_dump_json()), "table": table}


def recorded_answers(
    checkpoint: Path, tasks: list[Task], source: PairSource, samples: int
) -> list[RecordedAnswer]:
    """``checkpoint``'s answers to ``tasks`` with the feedback an IDE user gives them (the
    verifier standing in for the user). ``edit``: the greedy answer, a rejected one edited into
    the reference answer; ``onpolicy``: ``samples`` answers sampled at temperature 1, each
    accepted or rejected."""
    policy = load_policy(checkpoint)
    prompts = [policy.encode_prompt(t.messages()) for t in tasks]
    per_task = 1 if source == "edit" else samples
    outs = generate(
        policy,
        [p for p in prompts for _ in range(per_task)],
        max_new_tokens=64,
        temperature=0.0 if source == "edit" else 1.0,
        seed=13,
    )
    answers = []
    for i, ids in enumerate(outs):
        task, answer = tasks[i // per_task], policy.decode(ids)
        passed = verify(task.labels(), answer)[0]
        edit = task.reference_reply if source == "edit" and not passed else None
        answers.append(RecordedAnswer(task.messages(), answer, passed, edit, task.labels()))
    return answers


def families_with_pairs(answers: list[RecordedAnswer]) -> dict[str, int]:
    """Prompts per family that give a pair: an edited answer, or accepted and rejected ones."""
    verdicts: dict[str, set[bool]] = {}
    for a in answers:
        seen = verdicts.setdefault(a.tags["task_id"], set())
        seen.update((True, False) if a.edit is not None else (a.accepted,))
    counts: dict[str, int] = {}
    for task_id, seen in verdicts.items():
        if seen == {True, False}:
            family = task_id.split(":")[0]
            counts[family] = counts.get(family, 0) + 1
    return dict(sorted(counts.items()))


def pair_families(s: BenchSettings, counts: dict[str, int]) -> list[str]:
    """The families the DPO effect is measured on: those with pairs (at least
    ``min_family_pairs`` prompts)."""
    return [name for name, n in counts.items() if n >= s.min_family_pairs]


def dpo_effect(s: BenchSettings, sft_candidate: Path, items: list[EvalItem]) -> dict[str, Any]:
    """DPO on pairs the exporter makes from recorded feedback, on top of the SFT candidate:
    held-out margins; the gate on ``items``; per family with pairs, the accept rate before and
    after on ``dpo_heldout_per_family`` held-out items, paired (``rl_loop.paired_eval``)."""
    answers = recorded_answers(
        sft_candidate, sample_tasks(s.pair_prompts, seed=13), s.pair_source, s.pair_samples
    )
    train = export_pairs(answers, max_pairs_per_prompt=s.pairs_per_prompt)
    heldout_answers = recorded_answers(
        sft_candidate,
        sample_tasks(s.pair_prompts // 4, seed=13, split="heldout"),
        s.pair_source,
        s.pair_samples,
    )
    heldout = export_pairs(heldout_answers, max_pairs_per_prompt=s.pairs_per_prompt)
    path = s.out / "pairs.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in train))
    result = run("new-1proc", job_file("dpo", sft_candidate, s, preference_data=path))
    policies = {
        "sft": load_policy(sft_candidate),
        "sft+dpo": load_policy(Path(result["checkpoint"])),
    }
    before, after = (preference_margins(policies[k], heldout) for k in ("sft", "sft+dpo"))
    config = GateConfig(max_new_tokens=64)
    counts = families_with_pairs(answers)
    measured = heldout_items(s.dpo_heldout_per_family, pair_families(s, counts))
    cache: AnswerCache = {}  # the gate's items are the first of the measured ones
    evals, paired_evals = (
        {k: evaluate_policy(p, k, on, verify, config, cache=cache) for k, p in policies.items()}
        for on in (items, measured)
    )
    gate_report = gate(evals["sft"], evals["sft+dpo"], config)
    paired = paired_changes(paired_evals["sft"], paired_evals["sft+dpo"])
    return {
        "source": s.pair_source,
        "pairs": [len(train), len(heldout)],
        "prompts_with_pairs": counts,
        "steps": result["phases"].get("dpo", {}).get("steps", 0),
        "heldout_margin": [round(statistics.fmean(m or [0.0]), 2) for m in (before, after)],
        "heldout_margin_wins": sum(a > b for a, b in zip(after, before, strict=True))
        / max(1, len(before)),
        "gate_passed": gate_report.passed,
        "gate_reasons": gate_report.reasons,
        "accept_rate": [round(evals[k].overall.accept_rate, 3) for k in ("sft", "sft+dpo")],
        "ppl": [round(evals[k].ppl or 0.0, 2) for k in ("sft", "sft+dpo")],
        "paired": {name: c.to_json() for name, c in paired.items()},
    }


def render(result: dict[str, Any]) -> str:
    t = result["table"]
    lines = [
        f"{'variant':<11} {'sft tok/s':>10} {'rl tok/s':>9} {'sft loss':>9} {'rl loss':>8} "
        f"{'rss MB':>7} {'gate':>5} {'accept':>7} {'ppl':>6}",
    ]
    for v in ("previous", "new-1proc", "new-2proc"):
        r = t[v]
        lines.append(
            f"{v:<11} {r['sft']['tokens_per_s']:>10} {r['rl']['tokens_per_s']:>9} "
            f"{r['sft']['last_loss']:>9} {r['rl']['last_loss']:>8} {r['peak_rss_mb']:>7} "
            f"{'pass' if r['gate_passed'] else 'fail':>5} {r['accept_rate']:>7} {r['ppl']:>6}"
        )
    d = t["dpo"]
    lines.append(f"base accept rate {t['base']['accept_rate']}")
    lines.append(
        f"dpo ({d['steps']} steps, {d['pairs'][0]} {d['source']} pairs): held-out margin "
        f"{d['heldout_margin'][0]} -> {d['heldout_margin'][1]} (wins "
        f"{d['heldout_margin_wins']:.0%}), gate {'pass' if d['gate_passed'] else 'fail'}, accept "
        f"{d['accept_rate'][0]} -> {d['accept_rate'][1]}; paired, families with pairs:"
    )
    for name, c in d["paired"].items():
        lo, hi = c["ci95"]
        lines.append(
            f"  {name:<16} {c['before']:.3f} -> {c['after']:.3f} ({c['delta']:+.3f}, 95% CI "
            f"[{lo:+.3f}, {hi:+.3f}], +{c['gained']}/-{c['lost']}, p={c['p']}, n={c['n']})"
        )
    return "\n".join(lines)


def summary(result: dict[str, Any]) -> dict[str, Any]:
    t = result["table"]
    prev, one, two = t["previous"], t["new-1proc"], t["new-2proc"]
    sft_ratio = one["sft"]["tokens_per_s"] / prev["sft"]["tokens_per_s"]
    rl_ratio = one["rl"]["tokens_per_s"] / prev["rl"]["tokens_per_s"]
    ddp_gap = abs(two["sft"]["last_loss"] - one["sft"]["last_loss"]) / one["sft"]["last_loss"]
    return {
        "sft_tokens_per_s_new_over_previous": round(sft_ratio, 3),
        "rl_tokens_per_s_new_over_previous": round(rl_ratio, 3),
        "speed_target_met": min(sft_ratio, rl_ratio) >= SPEED_TARGET,
        "same_gate_result": prev["gate_passed"] == one["gate_passed"],
        "sft_tokens_per_s_2proc_over_1proc": round(
            two["sft"]["tokens_per_s"] / one["sft"]["tokens_per_s"], 3
        ),
        "ddp_sft_loss_rel_gap": round(ddp_gap, 4),
        "ddp_within_tolerance": ddp_gap <= DDP_LOSS_TOLERANCE,
        "dpo_heldout_margin": t["dpo"]["heldout_margin"],
        "dpo_gate_passed": t["dpo"]["gate_passed"],
        "dpo_paired_delta": {k: c["delta"] for k, c in t["dpo"]["paired"].items()},
        "dpo_paired_ci95": {k: c["ci95"] for k, c in t["dpo"]["paired"].items()},
        "dpo_improves_families_with_pairs": t["dpo"]["paired"]["*overall"]["ci95"][0] > 0,
    }


def main(argv: list[str] | None = None) -> int:
    defaults = BenchSettings()
    parser = argparse.ArgumentParser(prog="python -m loadtests.bench.train", description=__doc__)
    parser.add_argument("--out", type=Path, help=f"default {defaults.out}")
    parser.add_argument("--pair-source", choices=("onpolicy", "edit"))
    for name in (
        "sft_steps", "rl_steps", "dpo_steps", "repeats", "pretrain_steps", "dpo_heldout_per_family",
    ):  # fmt: skip
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=int, help=f"default {getattr(defaults, name)}")
    parser.add_argument("--reference-job", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reference_job is not None:  # one run of the previous loop, in its own process
        run_reference_job(load_job(args.reference_job))
        return 0
    given = {k: v for k, v in vars(args).items() if v is not None and k != "reference_job"}
    settings = BenchSettings(**given)
    result = bench(settings)
    result["summary"] = summary(result)
    (settings.out / "bench_train.json").write_text(json.dumps(result, indent=2) + "\n")
    print(render(result))
    print(json.dumps(result["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
