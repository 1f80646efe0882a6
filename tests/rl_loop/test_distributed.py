"""The same training job under `accelerate launch` with 2 CPU processes (gloo DDP, each process
half of every batch) takes the steps of 1 process: the same losses, step by step, within float
tolerance, for the RL and the SFT phase."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from rl_loop.modeling import Encoded, generate, load_policy
from rl_loop.rollouts import Rollout
from rl_loop.scoring import label_logprobs, make_batch
from rl_loop.train import main, write_rollouts
from serving.replica import find_free_port

REPO = Path(__file__).resolve().parents[2]
CPU_DDP = REPO / "rl_loop" / "configs" / "accelerate" / "cpu-ddp.yaml"
QUESTIONS = [f"def f{i}(x): return x * {i}\nWhat does f{i}(2) return?" for i in range(12)]


def _data(micro_model: Path, root: Path) -> tuple[Path, Path]:
    sft = root / "sft.jsonl"
    sft.write_text(
        "".join(
            json.dumps(
                {
                    "messages": [
                        {"role": "system", "content": "Answer with a number."},
                        {"role": "user", "content": q},
                        {"role": "assistant", "content": str(2 * i)},
                    ]
                }
            )
            + "\n"
            for i, q in enumerate(QUESTIONS)
        )
    )
    policy = load_policy(micro_model)
    rollouts = []
    for g, q in enumerate(QUESTIONS[:4]):
        prompt = policy.encode_prompt([{"role": "user", "content": q}])
        completions = generate(policy, [prompt] * 4, max_new_tokens=6, temperature=1.0, seed=g)
        batch = make_batch([Encoded(prompt, c) for c in completions], policy.pad_id, policy.device)
        with torch.no_grad():
            logp = label_logprobs(policy.model, batch)
        for i, c in enumerate(completions):
            engine = tuple(v - 0.02 for v in logp[i][batch.mask[i]].tolist())
            rollouts.append(Rollout(prompt, tuple(c), engine, f"g{g}", 0.75 if i % 2 else -0.25))
    path = root / "rollouts.jsonl"
    write_rollouts(path, rollouts)
    return sft, path


def _job(micro_model: Path, sft: Path, rollouts: Path, out: Path) -> Path:
    job = {
        "model": str(micro_model),
        "sft_data": str(sft),
        "rollouts": str(rollouts),
        "loop": {
            "work_dir": str(out),
            "rl": {"steps": 3, "batch_size": 8, "lr": 1e-3},
            # No replay: each process would draw its own code windows.
            "sft": {
                "steps": 5,
                "batch_size": 4,
                "lr": 3e-3,
                "warmup_steps": 1,
                "replay_windows": 0,
            },
        },
    }
    path = out.parent / f"{out.name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


@pytest.mark.slow
def test_two_cpu_processes_take_the_steps_of_one(micro_model: Path, tmp_path: Path) -> None:
    sft, rollouts = _data(micro_model, tmp_path)
    assert main(["--config", str(_job(micro_model, sft, rollouts, tmp_path / "one"))]) == 0
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CPU_DDP),
        "--num_processes",
        "2",
        "--main_process_port",
        str(find_free_port()),
        "-m",
        "rl_loop.train",
        "--config",
        str(_job(micro_model, sft, rollouts, tmp_path / "two")),
    ]
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one = json.loads((tmp_path / "one" / "result.json").read_text())
    two = json.loads((tmp_path / "two" / "result.json").read_text())
    assert (one["processes"], two["processes"]) == (1, 2)
    for phase, steps in (("rl", 3), ("sft", 5)):
        assert len(one["losses"][phase]) == steps
        assert two["losses"][phase] == pytest.approx(one["losses"][phase], rel=1e-3, abs=1e-4)
    assert two["phases"]["sft"]["last_loss"] < two["phases"]["sft"]["first_loss"]
