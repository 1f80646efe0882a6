"""The GPU smoke check (issue 46): what a lent GPU machine can run of the GPU paths, within a time
budget, ending with one JSON line. ``scripts/gpu_smoke.sh`` is the entry (it picks the Python
and installs carried wheels); docs/deploy.md says how to run it and where.

Stages, in order, each with its own time limit out of the budget (a stage that cannot start in
time is skipped with the reason; one that needs what is missing too):

    env              versions, CUDA devices; what is missing decides what is skipped
    prepare          the tiny preset (built if absent), synthetic rollouts / pairs / SFT rows,
                     the two job files (``python -m scripts.gpu_smoke prepare``)
    reference_gloo   the reference on 2 CPU processes under FSDP2 (scripts/reference_ranks.py)
    reference_fsdp2  the same inside a DPO trainer under accelerate's FSDP2 on every GPU
    fsdp2_step       one RL and one DPO step of the FSDP2 job (fsdp2-moe.yaml)
    zero3_step       the same job under deepspeed-zero3.yaml, when deepspeed is installed
    lora_step        one SFT and one DPO step of the LoRA job (gpu-ddp.yaml)
    learnability     scripts/agent_learnability.py on a larger preset, with the time left
    vllm             the ``requires_gpu`` tests (fp8 serving, LoRA in vLLM), with ``--vllm``

A training step passes when its phases took their step, every loss is finite, the checkpoint
was saved, and the reference equals the policy at the first step (RL's KL and DPO's margin
about 0: both start from the same weights, so a wrong reference shows there).

``--dry-run`` runs nothing: it plans every stage (its command and limit) and prints the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from serving.model_config import PresetName

REPO = Path(__file__).resolve().parents[1]
ACCELERATE = REPO / "rl_loop" / "configs" / "accelerate"
SCRIPTS = REPO / "scripts"
STAGES = str(SCRIPTS / "gpu_smoke_stages.py")
REFERENCE = str(SCRIPTS / "reference_ranks.py")
KL_ATOL = 1e-3  # RL's KL to the reference at the first step (same weights: 0)
MARGIN_ATOL = 1e-2  # DPO's reward margin at the first step (beta * 0)
RESERVE_S = 5.0  # kept for the final line


class SmokeSettings(BaseModel):
    """One smoke run; each default is defined here once (the CLI overrides)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dry_run: bool = Field(default=False, description="Plan and print, run nothing.")
    budget_s: float = Field(default=480.0, gt=0, description="Wall-clock budget of all stages.")
    out: Path = Field(default=REPO / ".cache" / "gpu-smoke", description="Work directory.")
    models: Path = Field(
        default=REPO / ".cache" / "models",
        description="Where the tiny preset is found or built (make demo's; carry it along to "
        "skip training a tokenizer).",
    )
    gpus: int | None = Field(default=None, ge=1, description="Processes (default: every GPU).")
    learnability_preset: PresetName = Field(default="small", description="Preset to learn.")
    learnability_budgets: tuple[int, ...] = Field(default=(0, 20), min_length=1)
    learnability_pretrain_steps: int = Field(
        default=0, ge=0, description="Base training first (on the CPU: slow for small)."
    )
    skip_learnability: bool = False
    vllm: bool = Field(default=False, description="Also the requires_gpu tests (needs vLLM).")


class Stage(BaseModel):
    """One stage's outcome in the final line."""

    name: str
    ok: bool | None = None  # None: skipped or planned
    seconds: float = 0.0
    skipped: str | None = None
    command: list[str] = Field(default_factory=list)
    limit_s: float = 0.0
    detail: dict[str, Any] = Field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def launch(config: str, processes: int, *program: str) -> list[str]:
    """``accelerate launch`` with this Python and one of the repository's configs; ``program``
    is a script and its arguments, or ``-m`` and a module."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ACCELERATE / config),
        "--num_processes",
        str(processes),
        "--main_process_port",
        str(free_port()),
        *program,
    ]


def last_json(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object, if any."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return None


def check_train(result: Mapping[str, Any], steps: Mapping[str, int]) -> dict[str, Any]:
    """A one-step job's ``result.json`` judged (see the module docstring); ``ok`` and why."""
    problems: list[str] = []
    phases = result.get("phases", {})
    for name, want in steps.items():
        phase = phases.get(name)
        if phase is None or phase.get("steps") != want:
            problems.append(f"{name}: {want} step(s) expected, got {phase and phase.get('steps')}")
    for name, losses in result.get("losses", {}).items():
        if not losses or not all(math.isfinite(v) for v in losses):
            problems.append(f"{name}: losses {losses}")
    kl = phases.get("rl", {}).get("kl_first")
    if "rl" in steps and (kl is None or abs(kl) > KL_ATOL):
        problems.append(f"rl: KL to the reference at step 1 is {kl}, not ~0")
    margin = phases.get("dpo", {}).get("rewards/margins_first")
    if "dpo" in steps and (margin is None or abs(margin) > MARGIN_ATOL):
        problems.append(f"dpo: reward margin at step 1 is {margin}, not ~0")
    checkpoint = result.get("checkpoint")
    if not checkpoint or not (Path(checkpoint) / "config.json").exists():
        problems.append(f"no checkpoint saved ({checkpoint})")
    return {"ok": not problems, "problems": problems, "phases": phases}


def check_reference(report: Mapping[str, Any] | None) -> dict[str, Any]:
    if report is None:
        return {"ok": False, "problems": ["no JSON line"]}
    return {"ok": bool(report.get("ok")), "ranks": report.get("ranks"), "world": report["world"]}


def check_learnability(report: Mapping[str, Any] | None) -> dict[str, Any]:
    if report is None or "budgets" not in report:
        return {"ok": False, "problems": ["no report line"]}
    keep = ("steps", "loss_first", "loss_last", "success", "validity", "train_seconds")
    budgets = [{k: b.get(k) for k in keep} for b in report["budgets"]]
    return {"ok": True, "parameters": report.get("parameters"), "budgets": budgets}


class Smoke:
    """Runs (or plans) the stages against one budget."""

    def __init__(self, settings: SmokeSettings) -> None:
        self.settings = settings
        self.started = time.monotonic()
        self.stages: list[Stage] = []
        self.env: dict[str, Any] = {}
        self.prepared: dict[str, Any] = {}

    def remaining(self) -> float:
        return self.settings.budget_s - (time.monotonic() - self.started) - RESERVE_S

    def stage(
        self,
        name: str,
        command: list[str],
        cap_s: float,
        judge: Callable[[str], dict[str, Any]],
        needs: str | None = None,
        min_s: float = 20.0,
    ) -> Stage:
        """Run ``command`` within ``min(cap_s, what is left)`` and judge its stdout."""
        limit = min(cap_s, self.remaining())
        stage = Stage(name=name, command=command, limit_s=round(max(limit, 0.0), 1))
        self.stages.append(stage)
        if self.settings.dry_run:
            stage.skipped = "dry run"
        elif needs is not None:
            stage.skipped = needs
        elif limit < min_s:
            stage.skipped = f"budget spent ({limit:.0f} s left)"
        if stage.skipped is not None:
            return stage
        logs = self.settings.out / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        begun = time.monotonic()
        try:
            proc = subprocess.run(
                command, cwd=REPO, capture_output=True, text=True, timeout=limit, check=False
            )
        except subprocess.TimeoutExpired as timeout:
            stage.ok, stage.detail = False, {"problems": [f"timed out after {limit:.0f} s"]}
            (logs / f"{name}.log").write_text(str(timeout.stdout or "") + str(timeout.stderr or ""))
        else:
            (logs / f"{name}.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
            stage.detail = judge(proc.stdout) if proc.returncode == 0 else {}
            stage.detail.setdefault("returncode", proc.returncode)
            stage.ok = proc.returncode == 0 and bool(stage.detail.get("ok"))
            if not stage.ok:
                stage.detail["stderr_tail"] = proc.stderr[-800:]
        stage.seconds = round(time.monotonic() - begun, 1)
        return stage

    def _result(self, job: str, steps: Mapping[str, int]) -> Callable[[str], dict[str, Any]]:
        def judge(_: str) -> dict[str, Any]:
            path = self.settings.out / "train" / job / "result.json"
            if not path.exists():
                return {"ok": False, "problems": [f"{path} missing"]}
            return check_train(json.loads(path.read_text()), steps)

        return judge

    def run(self) -> dict[str, Any]:
        s, py = self.settings, sys.executable
        env = self.stage("env", [py, STAGES, "env"], 60, self._env)
        missing = self.env.get("missing", [])
        gpus = s.gpus or int(self.env.get("gpus") or 1)
        no_stack = f"missing: {', '.join(missing)}" if missing else None
        no_gpu = no_stack or (None if s.dry_run or self.env.get("gpus") else "no CUDA device")
        if env.ok is False:
            no_stack = no_gpu = "env stage failed"
        out = str(s.out)
        prepare = [py, STAGES, "prepare", "--models", str(s.models)]
        prepare += ["--out", out, "--gpus", str(gpus)]
        self.stage("prepare", prepare, 180, self._prepare, needs=no_stack)
        if self.stages[-1].ok is False:
            no_stack = no_gpu = "prepare stage failed"
        checkpoint = str(self.prepared.get("checkpoint", s.models / "tiny" / "<built>"))
        jobs = s.out / "jobs"
        reference = [REFERENCE, "--checkpoint", checkpoint]
        self.stage(
            "reference_gloo",
            [py, *reference, "--gloo", "2"],
            120,
            lambda text: check_reference(last_json(text)),
            needs=no_stack,
        )
        self.stage(
            "reference_fsdp2",
            launch("fsdp2-moe.yaml", gpus, *reference),
            150,
            lambda text: check_reference(last_json(text)),
            needs=no_gpu,
        )
        train = ("-m", "rl_loop.train", "--config")
        both = {"rl": 1, "dpo": 1}
        fsdp2 = [*train, str(jobs / "fsdp2.yaml")]
        self.stage(
            "fsdp2_step",
            launch("fsdp2-moe.yaml", gpus, *fsdp2),
            180,
            self._result("fsdp2", both),
            needs=no_gpu,
        )
        no_deepspeed = no_gpu or (
            None if s.dry_run or "deepspeed" in self.env.get("versions", {}) else "no deepspeed"
        )
        zero3 = [*train, str(jobs / "zero3.yaml")]
        self.stage(
            "zero3_step",
            launch("deepspeed-zero3.yaml", gpus, *zero3),
            180,
            self._result("zero3", both),
            needs=no_deepspeed,
        )
        lora = [*train, str(jobs / "lora.yaml")]
        self.stage(
            "lora_step",
            launch("gpu-ddp.yaml", gpus, *lora),
            150,
            self._result("lora", {"sft": 1, "dpo": 1}),
            needs=no_gpu,
        )
        learn = [py, str(SCRIPTS / "agent_learnability.py"), "--preset", s.learnability_preset]
        learn += ["--device", "cuda", "--pretrain-steps", str(s.learnability_pretrain_steps)]
        learn += ["--budgets", *map(str, s.learnability_budgets), "--cache", str(s.out / "cache")]
        learn += ["--trajectories", "24", "--heldout", "4"]
        lacking = self.env.get("missing_learnability") or []
        self.stage(
            "learnability",
            learn,
            math.inf,
            lambda text: check_learnability(last_json(text)),
            needs="--skip-learnability"
            if s.skip_learnability
            else no_gpu or (f"missing: {', '.join(lacking)}" if lacking else None),
            min_s=60.0,
        )
        if s.vllm:
            no_vllm = no_gpu or (
                None if s.dry_run or "vllm" in self.env.get("versions", {}) else "no vllm"
            )
            tests = [py, "-m", "pytest", "-q", "-m", "requires_gpu", "-p", "no:cacheprovider"]
            self.stage("vllm", [*tests, "tests/"], math.inf, self._pytest, needs=no_vllm)
        return self.summary(gpus)

    def _env(self, text: str) -> dict[str, Any]:
        self.env = last_json(text) or {}
        return {"ok": bool(self.env), **self.env}

    def _prepare(self, text: str) -> dict[str, Any]:
        self.prepared = last_json(text) or {}
        return {"ok": "checkpoint" in self.prepared, **self.prepared}

    @staticmethod
    def _pytest(text: str) -> dict[str, Any]:
        return {"ok": True, "summary": text.strip().splitlines()[-1] if text.strip() else ""}

    def summary(self, gpus: int) -> dict[str, Any]:
        ran = [st for st in self.stages if st.skipped is None]
        return {
            "smoke": "gpu",
            "ok": None if self.settings.dry_run else bool(ran) and all(st.ok for st in ran),
            "dry_run": self.settings.dry_run,
            "device": self.env.get("device"),
            "gpus": gpus,
            "budget_s": self.settings.budget_s,
            "seconds": round(time.monotonic() - self.started, 1),
            "ran": [st.name for st in ran],
            "skipped": {st.name: st.skipped for st in self.stages if st.skipped is not None},
            "stages": [st.model_dump(exclude_defaults=True) for st in self.stages],
        }


def parse_settings(argv: Sequence[str] | None = None) -> SmokeSettings:
    """Settings from the command line; an option left out keeps the field's default."""
    parser = argparse.ArgumentParser(
        prog="scripts/gpu_smoke.sh", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dry-run", action="store_true", default=None)
    parser.add_argument("--budget-s", type=float)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--models", type=Path)
    parser.add_argument("--gpus", type=int)
    parser.add_argument("--learnability-preset")
    parser.add_argument("--learnability-budgets", type=int, nargs="+")
    parser.add_argument("--learnability-pretrain-steps", type=int)
    parser.add_argument("--skip-learnability", action="store_true", default=None)
    parser.add_argument("--vllm", action="store_true", default=None)
    args = vars(parser.parse_args(argv))
    return SmokeSettings.model_validate({k: v for k, v in args.items() if v is not None})


def main(argv: Sequence[str] | None = None) -> int:
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if str(REPO) not in paths:  # the stages import the repository's packages
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, paths)])
    report = Smoke(parse_settings(argv)).run()
    print(json.dumps(report), flush=True)
    return 0 if report["ok"] is not False else 1


if __name__ == "__main__":
    sys.exit(main())
