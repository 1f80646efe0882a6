"""The GPU smoke check's own stages (``scripts/gpu_smoke.py``): the environment probe and the
inputs of the one-step jobs. Apart from the orchestrator so that its dry run imports no torch.

``prepare`` finds the tiny preset under ``--models`` (built when absent), and writes under
``--out`` 16
rollouts in 4 groups with mixed rewards, 16 preference pairs and 16 SFT rows (``data/``), and
three jobs (``jobs/``): ``fsdp2.yaml`` and ``zero3.yaml`` (one RL and one DPO step, full
fine-tuning, bf16, ``grouped_mm`` experts, gradient checkpointing) and ``lora.yaml`` (one SFT
and one DPO step of LoRA adapters). Every batch is a multiple of ``--gpus``; learning rates are
tiny, so the policy is still the reference when DPO starts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

REQUIRED = ("torch", "transformers", "accelerate", "peft", "trl", "datasets", "pydantic", "yaml")
OPTIONAL = ("deepspeed", "vllm")
# What the stages import: a module missing below them (orjson, detect_secrets...) is named too.
TRAINING_ENTRY = ("rl_loop.train", "rl_loop.trainers.placement")
LEARNABILITY_ENTRY = (
    "rl_loop.agent.distill",
    "rl_loop.agent.gate",
    "rl_loop.agent.sandbox_environment",
    "loadtests.frontier_sim.agent_policy",
)


def _unimportable(modules: Sequence[str]) -> list[str]:
    """The first missing module under each of ``modules`` (what a carried wheel must supply)."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as error:
            missing.append(error.name or name)
    return sorted(set(missing))


def probe_env() -> dict[str, Any]:
    """Versions of the stack, what is missing, the CUDA devices."""
    versions: dict[str, str] = {}
    missing: list[str] = []
    for name in (*REQUIRED, *OPTIONAL):
        try:
            module = importlib.import_module(name)
        except Exception:  # an import that fails for any reason: the stack lacks it
            if name in REQUIRED:
                missing.append(name)
            continue
        versions[name] = str(getattr(module, "__version__", "?"))
    if not missing:
        missing = _unimportable(TRAINING_ENTRY)
    report: dict[str, Any] = {"versions": versions, "missing": missing, "gpus": 0}
    report["missing_learnability"] = missing or _unimportable(LEARNABILITY_ENTRY)
    if "torch" in versions:
        import torch

        if torch.cuda.is_available():
            report["gpus"] = torch.cuda.device_count()
            report["device"] = torch.cuda.get_device_name(0)
            report["capability"] = list(torch.cuda.get_device_capability(0))
            report["cuda"] = torch.version.cuda
    return report


def _rows(checkpoint: Path) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]]]:
    from rl_loop.modeling import load_policy
    from rl_loop.rollouts import Rollout

    policy = load_policy(checkpoint)
    rollouts, pairs, sft = [], [], []
    for i in range(16):
        question = [{"role": "user", "content": f"What is {i} + {i}?"}]
        prompt = policy.encode_prompt(question)
        right = {"role": "assistant", "content": str(2 * i)}
        wrong = {"role": "assistant", "content": str(2 * i + 1)}
        turn = right if i % 2 else wrong
        completion = policy.encode_completion(turn["content"])
        engine = tuple(-1.0 for _ in completion)  # the replicas' logprobs: any finite values
        reward = 0.75 if i % 2 else -0.25
        rollouts.append(Rollout(prompt, completion, engine, f"g{i // 4}", reward))
        pairs.append({"prompt": question, "chosen": [right], "rejected": [wrong]})
        sft.append({"messages": [*question, right]})
    return rollouts, pairs, sft


def _job(checkpoint: Path, out: Path, name: str, gpus: int, **data: Path) -> dict[str, Any]:
    batch = 4 * gpus
    loop: dict[str, Any] = {
        "work_dir": str(out / "train" / name),
        "device": "cuda",
        "experts_implementation": "grouped_mm",
        "engine": {"bf16": True, "gradient_checkpointing": True},
        "dpo": {"steps": 1, "batch_size": batch, "lr": 1e-7, "warmup_steps": 0, "min_pairs": 1},
    }
    if name == "lora":
        loop["engine"] = {"bf16": True, "lora": {"r": 8, "alpha": 16, "save_adapters": True}}
        loop["rl"] = {"enabled": False}
        loop["sft"] = {"steps": 1, "batch_size": batch, "lr": 1e-4, "warmup_steps": 0}
        loop["sft"]["replay_windows"] = 0
    else:
        loop["rl"] = {"steps": 1, "batch_size": batch, "lr": 1e-7}
        loop["sft"] = {"steps": 0}
    return {"model": str(checkpoint), **{k: str(v) for k, v in data.items()}, "loop": loop}


def prepare(models: Path, out: Path, gpus: int) -> dict[str, Any]:
    """The model, the data and the jobs (see the module docstring)."""
    from rl_loop.train import write_rollouts
    from serving.build import ensure_model

    checkpoint = ensure_model(models, "tiny")
    rollouts, pairs, sft = _rows(checkpoint)
    data = out / "data"
    data.mkdir(parents=True, exist_ok=True)
    write_rollouts(data / "rollouts.jsonl", rollouts)
    for path, rows in ((data / "pairs.jsonl", pairs), (data / "sft.jsonl", sft)):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    jobs = out / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    full = {"rollouts": data / "rollouts.jsonl", "preference_data": data / "pairs.jsonl"}
    written = {
        "fsdp2": _job(checkpoint, out, "fsdp2", gpus, **full),
        "zero3": _job(checkpoint, out, "zero3", gpus, **full),
        "lora": _job(
            checkpoint,
            out,
            "lora",
            gpus,
            sft_data=data / "sft.jsonl",
            preference_data=data / "pairs.jsonl",
        ),
    }
    for name, job in written.items():
        (jobs / f"{name}.yaml").write_text(yaml.safe_dump(job, sort_keys=False))
    return {"checkpoint": str(checkpoint), "jobs": sorted(written), "rows": len(pairs)}


def main(argv: Sequence[str] | None = None) -> int:
    """``env`` or ``prepare``; one JSON line either way."""
    parser = argparse.ArgumentParser(prog="scripts/gpu_smoke_stages.py")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("env")
    setup = commands.add_parser("prepare")
    setup.add_argument("--models", type=Path, required=True)
    setup.add_argument("--out", type=Path, required=True)
    setup.add_argument("--gpus", type=int, required=True)
    args = parser.parse_args(argv)
    report = probe_env() if args.command == "env" else prepare(args.models, args.out, args.gpus)
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
