"""Does every rank's frozen reference model hold the checkpoint's weights once it is sharded
(issue 46, item 4)? The KL of the RL phase and DPO's margins are measured against it; a rank
whose shards are zeros makes both silently wrong.

Each rank loads the reference as the trainers do (``rl_loop.trainers.placement.load_model``:
under CPU-RAM-efficient FSDP only rank 0 reads the weights, the others hold a meta skeleton),
prepares it, then compares every full parameter (gathered) with rank 0's plain copy
(``parameter_digests``: sum, absolute sum, sum of squares per tensor) and the logits of a fixed
prompt with the plain copy's. Ends with one JSON line (rank 0).

    # accelerate's FSDP2 on the GPUs: the reference inside a real DPO trainer
    PYTHONPATH=. accelerate launch --config_file rl_loop/configs/accelerate/fsdp2-moe.yaml \\
        --num_processes N scripts/reference_ranks.py --checkpoint DIR
    # N CPU processes over gloo, FSDP2 with accelerate's preparation but not its launcher
    # (accelerate enables FSDP on accelerators only); --also-trl runs TRL's prepare_fsdp too
    PYTHONPATH=. python scripts/reference_ranks.py --checkpoint DIR --gloo 2 --also-trl
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.spawn import ProcessExitedException, spawn
from transformers import PreTrainedModel

from rl_loop.trainers.placement import (
    load_model,
    parameter_digests,
    placement_from_env,
    prepare_frozen,
)

PROMPT_IDS = [[5, 17, 42, 8, 99, 3, 64, 21]]
DIGEST_RTOL = 1e-9  # the same values summed in the same order: equal but for float64 rounding


@dataclass
class _GlooAccelerator:
    """What accelerate's and TRL's FSDP preparations read of an ``Accelerator``."""

    rank: int
    state: Any = field(init=False)
    mixed_precision: str = "no"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    parallelism_config: Any = None
    torch_device_mesh: Any = None

    def __post_init__(self) -> None:
        from accelerate.utils import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin(
            fsdp_version=2,
            auto_wrap_policy="transformer_based_wrap",
            cpu_ram_efficient_loading=True,
            reshard_after_forward=True,
        )
        self.state = argparse.Namespace(fsdp_plugin=plugin, deepspeed_plugin=None)

    @property
    def is_main_process(self) -> bool:
        return self.rank == 0


def _expected(model: PreTrainedModel, device: torch.device) -> dict[str, Any]:
    """Rank 0's plain copy: its digests and its logits of the fixed prompt."""
    plain = copy.deepcopy(model).to(device)  # type: ignore[arg-type]
    with torch.no_grad():
        logits = plain(input_ids=torch.tensor(PROMPT_IDS, device=device)).logits
    return {"digests": parameter_digests(plain), "logits": logits.float().cpu()}


def _compare(prepared: Any, expected: dict[str, Any], device: torch.device) -> dict[str, Any]:
    """This rank's prepared reference against rank 0's plain copy (a collective under FSDP2)."""
    got = parameter_digests(prepared)
    worst, zeroed = 0.0, 0
    for name, want in expected["digests"].items():
        have = got[name]
        scale = max(abs(w) for w in want) or 1.0
        worst = max(worst, max(abs(h - w) for h, w in zip(have, want, strict=True)) / scale)
        zeroed += int(have[1] == 0.0 and want[1] != 0.0)
    with torch.no_grad():
        logits = prepared(input_ids=torch.tensor(PROMPT_IDS, device=device)).logits
    from torch.distributed.fsdp import FSDPModule

    return {
        "rank": dist.get_rank(),
        "params": len(got),
        "max_rel_diff": worst,
        "zeroed_params": zeroed,
        "shard_units": sum(isinstance(m, FSDPModule) for m in prepared.modules()),
        "logits_max_abs_diff": float((logits.float().cpu() - expected["logits"]).abs().max()),
    }


def _verdict(ranks: list[dict[str, Any]], logits_atol: float) -> bool:
    return all(
        r["max_rel_diff"] <= DIGEST_RTOL
        and r["zeroed_params"] == 0
        and r["logits_max_abs_diff"] <= logits_atol
        for r in ranks
    )


def _broadcast(value: Any) -> Any:
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _gathered(value: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def check_reference(
    checkpoint: Path, accelerator: Any, device: torch.device, bf16: bool
) -> dict[str, Any]:
    """Load, prepare (``prepare_frozen``) and compare on every rank; rank 0's plain copy is the
    expectation. Every process of the group calls it."""
    reference = load_model(checkpoint, placement_from_env(str(device), bf16), trained_in_full=False)
    expected = _expected(reference, device) if dist.get_rank() == 0 else None
    expected = _broadcast(expected)
    prepared = prepare_frozen(accelerator, reference)
    return _compare(prepared, expected, device)


def check_trl_root_only(checkpoint: Path, accelerator: Any) -> dict[str, Any]:
    """The preparation this repository used before: transformers' loader on every rank, then
    TRL's ``prepare_fsdp`` (one shard unit, nothing broadcast)."""
    from transformers import AutoModelForCausalLM
    from trl.models.utils import prepare_fsdp

    model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.requires_grad_(False)
    expected = _broadcast(_expected(model, accelerator.device) if dist.get_rank() == 0 else None)
    return _compare(prepare_fsdp(model, accelerator), expected, accelerator.device)


def _gloo_worker(rank: int, world: int, port: int, checkpoint: str, also_trl: bool) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        ACCELERATE_USE_FSDP="true",
        FSDP_CPU_RAM_EFFICIENT_LOADING="true",
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        accelerator = _GlooAccelerator(rank)
        cpu = torch.device("cpu")
        ours = _gathered(check_reference(Path(checkpoint), accelerator, cpu, bf16=False))
        report: dict[str, Any] = {
            "check": "reference_ranks",
            "mode": "gloo",
            "world": world,
            "ok": _verdict(ours, logits_atol=1e-4),
            "ranks": ours,
        }
        if also_trl:
            trl = _gathered(check_trl_root_only(Path(checkpoint), accelerator))
            report["trl_root_only"] = {"ok": _verdict(trl, logits_atol=1e-4), "ranks": trl}
        if rank == 0:
            print(json.dumps(report), flush=True)
    finally:
        dist.destroy_process_group()
    if not report["ok"]:
        sys.exit(1)  # mp.spawn raises ProcessExitedException in the parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_accelerate(checkpoint: Path) -> dict[str, Any]:
    """Under ``accelerate launch`` (FSDP2 on GPUs): the reference inside a real DPO trainer."""
    from datasets import Dataset
    from trl.trainer.dpo_config import DPOConfig

    from rl_loop.config import EngineConfig
    from rl_loop.trainers.dpo import DpoTrainer, dpo_rows
    from rl_loop.trainers.engine import common_arguments, distributed_state
    from serving.tokenizer import load_tokenizer

    state = distributed_state("cuda")
    world, device = int(state.num_processes), state.device
    place = placement_from_env(str(device), bf16=True)
    policy = load_model(checkpoint, place, trained_in_full=True)
    reference = load_model(checkpoint, place, trained_in_full=False)
    expected = _broadcast(_expected(reference, device) if dist.get_rank() == 0 else None)
    turn = {"role": "user", "content": "What is 2 + 2?"}
    pair = {"prompt": [turn], "chosen": [{"role": "assistant", "content": "4"}]}
    pair["rejected"] = [{"role": "assistant", "content": "5"}]
    with tempfile.TemporaryDirectory() as scratch:
        arguments = common_arguments(
            output_dir=Path(scratch),
            steps=1,
            batch_size=world,
            lr=1e-6,
            grad_clip=1.0,
            seed=0,
            device="cuda",
            engine=EngineConfig(bf16=True),
        )
        trainer = DpoTrainer(
            model=policy,
            ref_model=reference,
            args=DPOConfig(**arguments, beta=0.1, router_aux_loss_coef=0.0, max_length=None),
            train_dataset=Dataset.from_list(dpo_rows([pair] * world)),
            processing_class=load_tokenizer(checkpoint),
        )
        ranks = _gathered(_compare(trainer.ref_model, expected, device))
    return {
        "check": "reference_ranks",
        "mode": "accelerate",
        "world": world,
        "ok": _verdict(ranks, logits_atol=5e-2) and all(r["shard_units"] > 1 for r in ranks),
        "ranks": ranks,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--gloo", type=int, default=0, help="Spawn N CPU processes (gloo).")
    parser.add_argument("--also-trl", action="store_true", help="Also TRL's root-only path.")
    args = parser.parse_args(argv)
    if args.gloo:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # a CPU mesh even on a GPU host
        try:
            spawn(  # type: ignore[no-untyped-call]
                _gloo_worker,
                args=(args.gloo, _free_port(), str(args.checkpoint), args.also_trl),
                nprocs=args.gloo,
            )
        except ProcessExitedException:
            return 1
        return 0
    report = run_accelerate(args.checkpoint)
    if dist.get_rank() == 0:
        print(json.dumps(report), flush=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
