"""`scripts/gpu_smoke.sh` on a machine without a GPU: its shell parses, its dry run plans every
stage within the budget and ends with one JSON line, bad options fail before anything runs,
carried wheels are installed offline, and the checks of a one-step job's result judge what a
wrong reference looks like. The slow test runs the stages a CPU can run (environment, inputs,
the two-rank reference over gloo) and skips the GPU ones with their reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scripts.gpu_smoke import check_train, last_json
from tests.fixtures.vllm_fixture import cache_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_smoke.sh"


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_a_dry_run_plans_every_stage_and_ends_with_one_json_line(tmp_path: Path) -> None:
    proc = _run("--dry-run", "--gpus", "2", "--budget-s", "300", "--out", str(tmp_path), "--vllm")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    names = [s["name"] for s in report["stages"]]
    assert names == [
        "env",
        "prepare",
        "reference_gloo",
        "reference_fsdp2",
        "fsdp2_step",
        "zero3_step",
        "lora_step",
        "learnability",
        "vllm",
    ]
    assert report["dry_run"] and report["ok"] is None and report["ran"] == []
    assert set(report["skipped"].values()) == {"dry run"}
    stages = {s["name"]: s for s in report["stages"]}
    assert all(0 < s["limit_s"] <= 300 for s in stages.values())
    fsdp2 = stages["fsdp2_step"]["command"]
    assert fsdp2[fsdp2.index("--num_processes") + 1] == "2"
    assert fsdp2[-1] == str(tmp_path / "jobs" / "fsdp2.yaml")
    assert stages["lora_step"]["command"][fsdp2.index("--config_file") + 1].endswith("gpu-ddp.yaml")
    learn = stages["learnability"]["command"]
    assert learn[learn.index("--preset") + 1] == "small"
    assert learn[learn.index("--device") + 1] == "cuda"


@pytest.mark.parametrize(
    "args", [["--budget-s", "-5"], ["--learnability-preset", "huge"], ["--no-such-option"]]
)
def test_bad_options_fail_before_anything_runs(args: list[str], tmp_path: Path) -> None:
    proc = _run("--dry-run", "--out", str(tmp_path), *args)
    assert proc.returncode != 0
    assert last_json(proc.stdout) is None
    assert not (tmp_path / "logs").exists()


def test_carried_wheels_are_installed_offline_into_the_work_dir(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "trl-1.16.0-py3-none-any.whl").write_bytes(b"")
    proc = _run("--dry-run", "--out", str(tmp_path), "--wheels", str(wheels))
    assert proc.returncode == 0, proc.stderr
    assert "--no-index --no-deps --target " + str(tmp_path / "site") in proc.stderr
    empty = tmp_path / "none"
    empty.mkdir()
    assert _run("--dry-run", "--wheels", str(empty)).returncode == 2


def _result(tmp_path: Path, **phases: dict[str, Any]) -> dict[str, Any]:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "config.json").write_text("{}")
    return {
        "phases": phases,
        "losses": {name: [0.7] for name in phases},
        "checkpoint": str(checkpoint),
    }


def test_a_one_step_job_passes_when_the_reference_is_the_policy(tmp_path: Path) -> None:
    good = _result(
        tmp_path,
        rl={"steps": 1, "kl_first": 2e-5},
        dpo={"steps": 1, "rewards/margins_first": -1e-4},
    )
    assert check_train(good, {"rl": 1, "dpo": 1})["ok"]


def test_a_wrong_reference_or_a_missing_step_fails_with_the_reason(tmp_path: Path) -> None:
    wrong = _result(
        tmp_path,
        rl={"steps": 1, "kl_first": 0.8},  # half the reference's shards zeros
        dpo={"steps": 0, "rewards/margins_first": 0.0},
    )
    wrong["losses"]["rl"] = [float("nan")]
    verdict = check_train(wrong, {"rl": 1, "dpo": 1})
    assert not verdict["ok"]
    text = " ".join(verdict["problems"])
    assert "KL" in text and "dpo: 1 step" in text and "nan" in text


@pytest.mark.slow  # imports the training stack several times and runs two gloo ranks: ~1 min
def test_on_a_cpu_the_cpu_stages_run_and_the_gpu_ones_say_why_not(tmp_path: Path) -> None:
    models = str(cache_dir() / "models")
    proc = _run("--out", str(tmp_path), "--models", models, "--budget-s", "400", timeout=420)
    report = last_json(proc.stdout)
    assert report is not None, proc.stderr[-3000:]
    assert report["ran"] == ["env", "prepare", "reference_gloo"], report
    assert report["ok"] and proc.returncode == 0
    assert report["skipped"]["fsdp2_step"] == "no CUDA device"
    stages = {s["name"]: s for s in report["stages"]}
    assert stages["reference_gloo"]["detail"]["world"] == 2
    assert {"fsdp2.yaml", "zero3.yaml", "lora.yaml"} <= {
        p.name for p in (tmp_path / "jobs").iterdir()
    }
