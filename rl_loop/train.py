"""Training a candidate from the record: the phases in order, on TRL + accelerate, from the
flywheel (``rl_loop.loop``) or from a file (this module's CLI).

    RL   on-policy RL on the served model's own samples (``rl_loop.trainers.onpolicy``)
    SFT  distillation / self-distillation on accepted answers (``rl_loop.trainers.sft``)
    DPO  preference training on the record's pairs (``rl_loop.trainers.dpo``)

Each phase starts from the weights the previous one left; the reference of RL's KL and of DPO
is the checkpoint the replicas serve (loaded again, frozen), or with LoRA the policy with its
adapters off. With LoRA each phase trains fresh adapters, merged into the weights when it ends
(and saved apart when ``engine.lora.save_adapters``). Every model is loaded as
``rl_loop.trainers.placement`` says (bf16 and on the CPU under FSDP or DeepSpeed, a meta
skeleton on FSDP ranks other than 0, partitioned under ZeRO-3); under FSDP or DeepSpeed the
trained weights are gathered through the trainer's own ``save_model`` and loaded again the same
way for the next phase. The result is gathered on every process and saved by the main one as a
new versioned checkpoint (bf16, probe included) whose parent is the served one; the gate
decides whether it is promoted.

CLI (one process, or any number under ``accelerate launch``; every process runs it, the main
one saves)::

    python -m rl_loop.train --config job.yaml
    accelerate launch --config_file rl_loop/configs/accelerate/cpu-ddp.yaml \\
        -m rl_loop.train --config job.yaml

The job names the checkpoint to train, the data files (the exporter's JSONL: ``sft`` records,
``preference_trl`` pairs; rollouts as the loop writes them) and the ``LoopConfig`` groups
(``rl_loop/configs/jobs/`` has examples). It writes ``<work_dir>/result.json``: the phases'
figures and the new checkpoint's directory. A data file exported with its ``manifest.json``
beside it gives the checkpoint its lineage: the manifest's dataset is written into the
checkpoint's ``lineage.json`` (``rl_loop.model_registry``), with the folder it is in.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import PartialState
from accelerate.utils import gather_object
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from transformers import PreTrainedModel, Trainer

from rl_loop.config import LoopConfig
from rl_loop.datasets import SftExample, sft_examples, within_caps
from rl_loop.model_registry import write_trained_on
from rl_loop.modeling import Policy, code_windows, save_checkpoint
from rl_loop.rollouts import Rollout
from rl_loop.scoring import restore_forward
from rl_loop.trainers.dpo import Pair, train_dpo
from rl_loop.trainers.engine import PhaseStats, distributed_state
from rl_loop.trainers.onpolicy import train_onpolicy
from rl_loop.trainers.placement import (
    Placement,
    gathered_model,
    load_model,
    placement_from_env,
    zero3_init_off,
)
from rl_loop.trainers.sft import train_sft
from serving.tokenizer import load_tokenizer
from traffic.export import EpisodeExportManifest, ExportManifest
from traffic.export.lineage import DatasetRef

REPLAY_CORPUS_BYTES = 1_500_000  # of stdlib training files: ~6,000 windows of 64 tokens
_MANIFESTS: TypeAdapter[ExportManifest | EpisodeExportManifest] = TypeAdapter(
    ExportManifest | EpisodeExportManifest
)


@dataclass(slots=True)
class PhaseData:
    """What the phases train on (an empty list skips its phase), and the datasets it was taken
    from: the lineage the trained checkpoint links."""

    rollouts: Sequence[Rollout] = ()
    sft: Sequence[SftExample] = ()
    pairs: Sequence[Pair] = ()
    datasets: Sequence[DatasetRef] = ()


def _peft_config(config: LoopConfig) -> Any:
    lora = config.engine.lora
    if lora is None:
        return None
    from peft import LoraConfig as PeftLoraConfig

    return PeftLoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )


def placement(config: LoopConfig) -> Placement:
    """Where this process loads models for ``config`` (``rl_loop.trainers.placement``)."""
    return placement_from_env(config.device, config.engine.bf16)


def load_for_training(checkpoint_dir: Path, config: LoopConfig, *, frozen: bool) -> Policy:
    """A checkpoint as the phases take it: trained in full unless ``frozen`` or LoRA trains
    adapters on it."""
    return Policy(
        _load(checkpoint_dir, config, frozen), load_tokenizer(checkpoint_dir), checkpoint_dir
    )


def _load(checkpoint_dir: Path, config: LoopConfig, frozen: bool) -> PreTrainedModel:
    return load_model(
        checkpoint_dir,
        placement(config),
        trained_in_full=not frozen and config.engine.lora is None,
        experts_implementation=config.experts_implementation,
    )


def _finish(trainer: Trainer | None, policy: Policy, config: LoopConfig, phase_dir: Path) -> Policy:
    """A phase's trained weights as a plain model for what comes next: gathered (on every
    process) and loaded again when sharded (FSDP, DeepSpeed); else LoRA merged (its adapter
    saved first when asked); TRL's and our forward patches dropped."""
    if trainer is None:
        return policy
    if trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled:
        trainer.save_model(str(phase_dir / "model"))
        PartialState().wait_for_everyone()
        loaded = _load(phase_dir / "model", config, frozen=False)
        return Policy(loaded, policy.tokenizer, policy.source)
    model: Any = trainer.model
    if hasattr(model, "merge_and_unload"):
        lora = config.engine.lora
        if lora is not None and lora.save_adapters and PartialState().is_main_process:
            model.save_pretrained(str(phase_dir / "adapter"))
        model = model.merge_and_unload()
    restore_forward(model)
    return Policy(model, policy.tokenizer, policy.source)


def train_candidate(
    policy: Policy, data: PhaseData, config: LoopConfig, out_dir: Path, seed: int
) -> tuple[Policy, dict[str, PhaseStats]]:
    """RL, SFT then DPO on ``policy`` (each phase with data and steps); returns the trained
    policy (``source`` still the served checkpoint) and each phase's figures."""
    stats: dict[str, PhaseStats] = {}
    peft = _peft_config(config)
    common: dict[str, Any] = {"seed": seed, "device": config.device, "engine": config.engine}

    def reference() -> Policy | None:
        """The served weights, frozen (None with LoRA: the policy with adapters off)."""
        if peft is not None:
            return None
        ref = load_for_training(policy.source, config, frozen=True)
        ref.model.requires_grad_(False)
        ref.model.train(False)
        return ref

    if config.rl.enabled and config.rl.steps > 0 and data.rollouts:
        run = policy
        if peft is not None:
            from peft import get_peft_model

            run = Policy(get_peft_model(policy.model, peft), policy.tokenizer, policy.source)
        stats["rl"], trainer = train_onpolicy(
            run, reference(), data.rollouts, config.rl, output_dir=out_dir / "rl", **common
        )
        if trainer is None and run is not policy:  # nothing trained: the adapters go again
            unwrapped: Any = run.model
            policy = Policy(unwrapped.unload(), policy.tokenizer, policy.source)
        policy = _finish(trainer, policy, config, out_dir / "rl")
    if config.sft.steps > 0 and data.sft:
        kept, too_long = within_caps(policy, data.sft, config.data)
        replay = None
        if config.sft.replay_windows > 0:
            replay = code_windows(
                str(policy.source), "train", config.sft.replay_seq_len, REPLAY_CORPUS_BYTES
            )
        stats["sft"], sft_trainer = train_sft(
            policy,
            kept,
            config.sft,
            output_dir=out_dir / "sft",
            replay=replay,
            peft_config=peft,
            **common,
        )
        stats["sft"].extra["too_long"] = float(too_long)
        policy = _finish(sft_trainer, policy, config, out_dir / "sft")
    if config.dpo.steps > 0 and data.pairs:
        stats["dpo"], dpo_trainer = train_dpo(
            policy,
            reference(),
            data.pairs,
            config.dpo,
            output_dir=out_dir / "dpo",
            peft_config=peft,
            **common,
        )
        policy = _finish(dpo_trainer, policy, config, out_dir / "dpo")
    return policy, stats


# ---------------------------------------------------------------- the CLI


class TrainJob(BaseModel):
    """A training run from files (``--config``); paths relative to the working directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: Path = Field(
        description="Versioned checkpoint to train (serving.build, or an "
        "adopted Hugging Face checkpoint: serving.checkpoint_preset)."
    )
    sft_data: Path | None = Field(default=None, description="Exported `sft` JSONL.")
    preference_data: Path | None = Field(
        default=None, description="Exported `preference_trl` JSONL (DPO pairs)."
    )
    rollouts: Path | None = Field(
        default=None, description="Rollouts JSONL (`rl_loop.rollouts.Rollout` fields)."
    )
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads per process.")
    loop: LoopConfig = Field(description="The loop's groups; `work_dir` receives the outputs.")


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_rollouts(path: Path, rollouts: Sequence[Rollout]) -> None:
    """Rollouts as JSONL (NaN for an unknown engine logprob), what ``rollouts:`` reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rollouts:
            f.write(json.dumps(dataclasses.asdict(r)) + "\n")


def read_rollouts(path: Path) -> list[Rollout]:
    def ids(v: Any) -> tuple[Any, ...] | None:
        return None if v is None else tuple(v)

    return [
        Rollout(
            prompt_ids=tuple(row["prompt_ids"]),
            completion_ids=tuple(row["completion_ids"]),
            rollout_logprobs=tuple(float(x) for x in row["rollout_logprobs"]),
            group=str(row["group"]),
            reward=float(row.get("reward", 0.0)),
            hint_prompt_ids=ids(row.get("hint_prompt_ids")),
            teacher_logprobs=ids(row.get("teacher_logprobs")),
        )
        for row in read_jsonl(path)
    ]


def exported_dataset(data_file: Path) -> DatasetRef | None:
    """The dataset ``data_file`` belongs to, from the exporter's ``manifest.json`` beside it (a
    dataset's or an episode export's; None: no manifest there, or one written before lineage)."""
    path = data_file.parent / "manifest.json"
    if not path.exists():
        return None
    manifest = _MANIFESTS.validate_json(path.read_text())
    if manifest.lineage is None:
        return None
    config = manifest.config.model_dump(mode="json")
    return DatasetRef(lineage=manifest.lineage, config=config, location=str(data_file.parent))


def load_job(path: Path) -> TrainJob:
    return TrainJob.model_validate(yaml.safe_load(path.read_text()))


def run_job(job: TrainJob) -> dict[str, Any]:
    """Train, save the candidate (main process) and write ``result.json``; every process of an
    ``accelerate launch`` runs this."""
    if job.threads is not None:
        torch.set_num_threads(job.threads)
    config = job.loop
    state = distributed_state(config.device)
    started = time.perf_counter()
    data = PhaseData(
        rollouts=read_rollouts(job.rollouts) if job.rollouts else [],
        sft=sft_examples(read_jsonl(job.sft_data)) if job.sft_data else [],
        pairs=read_jsonl(job.preference_data) if job.preference_data else [],
        datasets=[
            ref
            for file in (job.sft_data, job.preference_data)
            if file is not None and (ref := exported_dataset(file)) is not None
        ],
    )
    device = config.device
    if device != "cpu" and state.device.type != "cpu":
        device = str(state.device)  # each process on its own GPU
    config = config.model_copy(update={"device": device})
    policy = load_for_training(job.model, config, frozen=False)
    out = config.work_dir
    trained, stats = train_candidate(policy, data, config, out, config.seed)
    whole = gathered_model(trained.model, state.is_main_process)  # every process takes part
    result: dict[str, Any] = {
        "processes": state.num_processes,
        "phases": {name: s.to_json() for name, s in stats.items()},
        "losses": {name: s.losses for name, s in stats.items()},
        "seconds": round(time.perf_counter() - started, 1),
        "peak_rss_mb": max(gather_object([peak_rss_mb()])),
    }
    if whole is not None:  # the main process: nothing collective from here on
        with zero3_init_off():
            saved = save_checkpoint(
                Policy(whole, trained.tokenizer, trained.source),
                out / "checkpoints",
                kind=config.checkpoint_kind,
                seed=config.seed,
                metadata={"kind": "train-job", "phases": result["phases"]},
            )
        write_trained_on(saved, data.datasets)
        result["checkpoint"] = str(saved)
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    state.wait_for_everyone()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rl_loop.train",
        description="Train a candidate checkpoint (RL, SFT, DPO) on TRL + accelerate.",
    )
    parser.add_argument("--config", type=Path, required=True, help="Job YAML (TrainJob).")
    args = parser.parse_args(argv)
    result = run_job(load_job(args.config))
    if PartialState().is_main_process:
        print(json.dumps({k: v for k, v in result.items() if k != "losses"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
