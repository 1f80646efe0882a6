"""Base training: next-token prediction on Python source code, from a random-init checkpoint to a
new versioned checkpoint that vLLM serves.

The algorithm
-------------
1. Corpus. The Python standard library's own `.py` files, split into training and held-out files
   by a hash of each path (:mod:`serving.base_corpus`: the same split on every machine).
2. Token stream. Training files, in an order shuffled by `seed`, tokenized and concatenated up
   to `train_bytes`; likewise the held-out files (sorted order, `held_out_bytes`). Each stream
   is cut into non-overlapping windows of `seq_len + 1` tokens (input = window[:-1], target =
   window[1:]).
3. Optimisation. The model is trained in float32 (upcast from the bf16 checkpoint) with AdamW
   (betas 0.9/0.95, decoupled weight decay on matrices only), a linear warm-up over
   `warmup_steps` then a cosine decay to `min_lr_ratio * lr` (all three in `serving.training`,
   shared with the RL loop), gradient-norm clipping, and the
   MoE load-balancing loss (`router_aux_loss_coef` times Switch-Transformer's auxiliary loss)
   added to the cross-entropy so experts stay in use. Batches are drawn from a permutation of
   the training windows made by a `torch.Generator` seeded with `seed` (a new permutation each
   epoch); with the same init, config and seed two runs give bit-identical weights. The MoE
   experts run on the kernels `experts_implementation` names (the per-expert loop by default,
   the fastest on a CPU); they change the speed, not the function, so they are no part of the
   run's identity (:mod:`serving.base_checkpoints`). With a `copy_curriculum`
   (:mod:`serving.copy_curriculum`), copy windows come first (warm-up), then fill a share of each
   batch, then grow in length beside code windows (extension).
4. Evaluation. Held-out loss is the mean token cross-entropy over `eval_windows` held-out
   windows spread evenly over the held-out stream; perplexity is its exponential. It is
   measured before training, every `eval_every` steps and at the end.
5. Output. The trained weights are saved in bf16 beside the unchanged tokenizer files as
   `<out>/pretrain-<12 hex of the digest>/`, whose `switchyard_version.json` has the init's
   version as `parent`, the run's config and timings in `metadata`, the held-out figures in
   `eval` and a `probe`: the trained model's logprobs of `PROBE_TEXT`, which every replica must
   reproduce after a hot-swap. `loss_curve.png` (train loss per step, held-out loss per eval)
   lies beside the weights.

CLI: `python -m serving.train_base --preset tiny --steps 300 --out DIR` (builds the random init
under DIR when `--init` is not given) prints the figures and the new checkpoint's path.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, get_args

import torch
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from tqdm import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from serving.base_corpus import CorpusSpec, split_files, token_windows
from serving.build import (
    copy_tokenizer_files,
    ensure_model,
    finalize_checkpoint,
    read_version,
    save_hf_model,
    staging_dir,
)
from serving.copy_curriculum import (
    CopyPhase,
    CopySpec,
    copy_windows,
    extend_phase,
    ordinary_ids,
    random_repeat_figures,
    train_on_copies,
    warmup_phase,
)
from serving.logprob_probe import probe_reference
from serving.model_config import PresetName
from serving.tokenizer import load_tokenizer
from serving.training import (
    DEFAULT_EXPERTS_IMPLEMENTATION,
    ExpertsImplementation,
    adamw,
    held_out_loss,
    load_float32,
    set_lr,
    warmup_cosine_lr,
)

LOSS_CURVE_FILE = "loss_curve.png"
CHECKPOINT_KIND = "pretrain"
#: The copy probe run on every trained checkpoint (`eval`: copy_first_loss, copy_repeat_loss,
#: copy_top1): random ids, a span of this many tokens, repeated after as many.
COPY_PROBE_SPAN: Final = 32
COPY_PROBE_WINDOWS: Final = 16


class TrainBaseConfig(BaseModel):
    """Hyper-parameters of one base-training run (defaults: a few CPU minutes, tiny preset)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(default=300, ge=1)
    batch_size: int = Field(default=8, ge=1, description="Windows per step.")
    seq_len: int = Field(default=64, ge=8, description="Next-token targets per window.")
    lr: float = Field(default=3e-3, gt=0, description="Peak learning rate.")
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="Final lr / peak lr.")
    warmup_steps: int = Field(default=20, ge=0)
    weight_decay: float = Field(default=0.1, ge=0)
    grad_clip: float = Field(default=1.0, gt=0, description="Max global gradient norm.")
    router_aux_loss_coef: float = Field(default=0.01, ge=0, description="MoE balance loss.")
    eval_every: int = Field(default=100, ge=1, description="Steps between held-out evals.")
    eval_windows: int = Field(default=64, ge=1, description="Held-out windows per eval.")
    seed: int = 0
    corpus: CorpusSpec = CorpusSpec()
    copy_curriculum: CopySpec = Field(
        default=CopySpec(),
        description="Synthetic copy windows mixed into each batch (serving.copy_curriculum).",
    )
    experts_implementation: ExpertsImplementation = Field(
        default=DEFAULT_EXPERTS_IMPLEMENTATION,
        description="How transformers computes the MoE experts of the model being trained: "
        "'eager' (fastest on the CPU), 'grouped_mm' or 'batched_mm' (GPU kernels). Not part of "
        "the checkpoint's identity (see `serving.base_checkpoints.NON_IDENTITY_FIELDS`).",
    )


#: A smoke-sized run (seconds on a CPU): tests and `BENCH_QUICK` use it. It still moves the
#: logprobs far enough from the random init for a hot-swap probe to tell them apart.
QUICK_TRAINING = TrainBaseConfig(
    steps=12,
    batch_size=4,
    seq_len=32,
    eval_every=12,
    eval_windows=8,
    corpus=CorpusSpec(train_bytes=60_000, held_out_bytes=20_000),
)


@dataclass(frozen=True)
class TrainResult:
    """What a run produced: the checkpoint and its headline figures."""

    checkpoint_dir: Path
    version_id: str
    parent: str
    steps: int
    seconds: float
    train_loss_first: float
    train_loss_last: float
    held_out_ppl_init: float
    held_out_ppl: float
    copy_top1: float  # the copy probe's top-1 on the repeat (serving.copy_curriculum)


def plot_loss_curve(
    train_losses: Sequence[float], evals: Sequence[tuple[int, float]], path: Path, title: str
) -> None:
    """Train loss per step (raw and smoothed) and held-out loss per eval, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    steps = range(1, len(train_losses) + 1)
    ax.plot(steps, train_losses, color="tab:blue", alpha=0.3, linewidth=0.8, label="train")
    smoothed: list[float] = []
    for loss in train_losses:
        smoothed.append(loss if not smoothed else 0.9 * smoothed[-1] + 0.1 * loss)
    ax.plot(steps, smoothed, color="tab:blue", linewidth=1.5, label="train (EMA 0.9)")
    if evals:
        ax.plot(*zip(*evals, strict=True), "o-", color="tab:orange", label="held-out")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def train_base(
    init_dir: Path, out_dir: Path, config: TrainBaseConfig, *, progress: bool = True
) -> TrainResult:
    """Train the checkpoint in `init_dir` and save the result under `out_dir` (see the module
    docstring). Leaves torch's global RNG state as it found it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return _train(init_dir, out_dir, config, progress=progress)


@dataclass(frozen=True)
class _Corpus:
    train: torch.Tensor
    held_out: torch.Tensor
    train_files: int
    held_out_files: int
    ordinary_ids: torch.Tensor  # what copy windows and the copy probe draw


def _corpus(tokenizer: PreTrainedTokenizerFast, config: TrainBaseConfig) -> _Corpus:
    """Steps 1-2: the split, the seeded file order, the token windows."""
    spec = config.corpus
    train_files, held_out_files = split_files(spec)
    random.Random(config.seed).shuffle(train_files)
    windows = [
        token_windows(
            tokenizer,
            files,
            max_bytes=budget,
            max_bytes_per_file=spec.max_bytes_per_file,
            seq_len=config.seq_len,
        )
        for files, budget in (
            (train_files, spec.train_bytes),
            (held_out_files, spec.held_out_bytes),
        )
    ]
    held_out = windows[1]
    # Evenly spaced over the held-out stream, so every held-out file is represented.
    picks = torch.linspace(0, len(held_out) - 1, min(config.eval_windows, len(held_out)))
    ids = ordinary_ids(len(tokenizer), tokenizer.all_special_ids)
    return _Corpus(windows[0], held_out[picks.long()], len(train_files), len(held_out_files), ids)


def _optimise(
    model: PreTrainedModel, corpus: _Corpus, config: TrainBaseConfig, *, progress: bool
) -> tuple[list[float], list[tuple[int, float]], list[float]]:
    """Steps 3-4: (train loss per step, held-out loss per eval step, loss per step of the copy
    phases: warm-up, then extension); updates `model`."""
    model.config.output_router_logits = config.router_aux_loss_coef > 0
    model.config.router_aux_loss_coef = config.router_aux_loss_coef
    copies = torch.Generator().manual_seed(config.seed + 1)
    evals = [(0, held_out_loss(model, corpus.held_out, config.batch_size))]
    model.train()
    spec = config.copy_curriculum
    copy_losses = _copy_phase(model, corpus, config, copies, warmup_phase(spec), progress=progress)
    optimizer = adamw(model, config.lr, config.weight_decay)
    order = torch.Generator().manual_seed(config.seed)
    n_copy = config.copy_curriculum.windows_per_batch(config.batch_size)
    train_losses: list[float] = []
    permutation, cursor = torch.randperm(len(corpus.train), generator=order), 0
    bar = tqdm(range(config.steps), desc="base training", unit="step", disable=not progress)
    for step in bar:
        if cursor + config.batch_size > len(permutation):
            permutation, cursor = torch.randperm(len(corpus.train), generator=order), 0
        batch = corpus.train[permutation[cursor : cursor + config.batch_size - n_copy]]
        cursor += config.batch_size - n_copy
        if n_copy:
            synthetic = copy_windows(
                n_copy, batch.shape[1], corpus.ordinary_ids, config.copy_curriculum, copies
            )
            batch = torch.cat([synthetic, batch])
        lr = warmup_cosine_lr(
            step,
            steps=config.steps,
            peak=config.lr,
            warmup_steps=config.warmup_steps,
            min_lr_ratio=config.min_lr_ratio,
        )
        set_lr(optimizer, lr)
        # transformers shifts `labels` itself: the window's seq_len + 1 tokens give seq_len
        # next-token targets, the same ones `held_out_loss` scores.
        output = model(input_ids=batch, labels=batch)
        optimizer.zero_grad(set_to_none=True)
        output.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()
        aux = output.aux_loss.item() if output.aux_loss is not None else 0.0
        train_losses.append(output.loss.item() - config.router_aux_loss_coef * aux)
        bar.set_postfix(loss=f"{train_losses[-1]:.3f}", lr=f"{lr:.2e}")
        if (step + 1) % config.eval_every == 0 or step + 1 == config.steps:
            evals.append((step + 1, held_out_loss(model, corpus.held_out, config.batch_size)))
    bar.close()
    if spec.extend_windows:
        phase = extend_phase(spec)
        copy_losses += _copy_phase(model, corpus, config, copies, phase, progress=progress)
        # What the extension cost the code: the last held-out figure is measured after it.
        evals.append((config.steps, held_out_loss(model, corpus.held_out, config.batch_size)))
    model.config.output_router_logits = False
    return train_losses, evals, copy_losses


def _copy_phase(
    model: PreTrainedModel,
    corpus: _Corpus,
    config: TrainBaseConfig,
    generator: torch.Generator,
    phase: CopyPhase,
    *,
    progress: bool,
) -> list[float]:
    """One phase of the copy curriculum, with an optimizer of its own; code windows of any
    length are cut from the training token stream (the windows of `corpus.train`, joined)."""
    if not phase.schedule:
        return []
    stream = corpus.train.flatten()

    def code(count: int, length: int) -> torch.Tensor:
        windows = stream[: len(stream) // length * length].view(-1, length)
        return windows[torch.randint(0, len(windows), (count,), generator=generator)]

    return train_on_copies(
        model,
        adamw(model, phase.peak_lr, config.weight_decay),
        corpus.ordinary_ids,
        config.copy_curriculum,
        generator,
        phase,
        grad_clip=config.grad_clip,
        code=code,
        progress=progress,
    )


def _train(
    init_dir: Path, out_dir: Path, config: TrainBaseConfig, *, progress: bool
) -> TrainResult:
    init = read_version(init_dir)
    tokenizer = load_tokenizer(init_dir)
    corpus = _corpus(tokenizer, config)
    model = load_float32(init_dir, config.experts_implementation)
    started = time.perf_counter()
    train_losses, evals, copy_losses = _optimise(model, corpus, config, progress=progress)
    seconds = time.perf_counter() - started
    (_, init_loss), (_, final_loss) = evals[0], evals[-1]
    model.train(False)
    copy = random_repeat_figures(
        model, corpus.ordinary_ids, span=COPY_PROBE_SPAN, windows=COPY_PROBE_WINDOWS, seed=0
    )
    metadata: dict[str, JsonValue] = {
        "kind": "base-training",
        "init_dir": str(init_dir),
        "config": json.loads(config.model_dump_json()),
        "train_windows": len(corpus.train),
        "train_files": corpus.train_files,
        "held_out_files": corpus.held_out_files,
        "tokens_seen": config.steps * config.batch_size * config.seq_len,
        "copy_warmup_tokens": config.copy_curriculum.warmup_steps
        * config.copy_curriculum.warmup_batch_size
        * config.copy_curriculum.warmup_window,
        "copy_extend_windows": list(config.copy_curriculum.extend_windows),
        "copy_loss_first": copy_losses[0] if copy_losses else None,
        "copy_loss_last": copy_losses[-1] if copy_losses else None,
        "seconds": round(seconds, 2),
        "train_loss_first": train_losses[0],
        "train_loss_last": train_losses[-1],
        "held_out_curve": [[s, loss] for s, loss in evals],
        "loss_curve": LOSS_CURVE_FILE,
        "torch": torch.__version__,
    }
    eval_figures = {
        "held_out_loss_init": init_loss,
        "held_out_ppl_init": math.exp(init_loss),
        "held_out_loss": final_loss,
        "held_out_ppl": math.exp(final_loss),
        "held_out_tokens": float(corpus.held_out[:, 1:].numel()),
        **{f"copy_{name}": value for name, value in copy.items()},
    }
    with staging_dir(out_dir) as staging:
        model.to(getattr(torch, init.spec.dtype))
        save_hf_model(model, staging)  # type: ignore[arg-type]
        copy_tokenizer_files(init_dir, staging)
        # The probe comes from the weights as saved (bf16), read back in float32.
        probe = probe_reference(load_float32(staging), tokenizer)
        title = f"base training from {init.version_id} ({config.steps} steps)"
        plot_loss_curve(train_losses, evals, staging / LOSS_CURVE_FILE, title)
        target = finalize_checkpoint(
            staging,
            out_dir,
            kind=CHECKPOINT_KIND,
            parent=init.version_id,
            spec=init.spec,
            seed=config.seed,
            metadata=metadata,
            eval=eval_figures,
            probe=probe,
        )
    return TrainResult(
        checkpoint_dir=target,
        version_id=target.name,
        parent=init.version_id,
        steps=config.steps,
        seconds=seconds,
        train_loss_first=train_losses[0],
        train_loss_last=train_losses[-1],
        held_out_ppl_init=math.exp(init_loss),
        held_out_ppl=math.exp(final_loss),
        copy_top1=copy["repeat_top1"],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: train the preset's init (or `--init`) and print the figures and the checkpoint."""
    defaults = TrainBaseConfig()
    parser = argparse.ArgumentParser(
        prog="python -m serving.train_base", description="Base-train the Qwen3-MoE on code."
    )
    parser.add_argument("--preset", choices=get_args(PresetName), default="tiny")
    parser.add_argument("--out", type=Path, required=True, help="Parent of checkpoint dirs.")
    parser.add_argument("--init", type=Path, default=None, help="Init checkpoint (default: build).")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--seq-len", type=int, default=defaults.seq_len)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--train-bytes", type=int, default=defaults.corpus.train_bytes)
    parser.add_argument(
        "--copy-fraction",
        type=float,
        default=defaults.copy_curriculum.fraction,
        help="Share of each batch that is copy windows (serving.copy_curriculum).",
    )
    parser.add_argument(
        "--copy-warmup-steps",
        type=int,
        default=defaults.copy_curriculum.warmup_steps,
        help="Steps of short copy windows alone before the code (serving.copy_curriculum).",
    )
    parser.add_argument(
        "--experts-implementation",
        choices=get_args(ExpertsImplementation),
        default=defaults.experts_implementation,
        help="MoE experts kernels (grouped_mm on a GPU).",
    )
    args = parser.parse_args(argv)
    config = defaults.model_copy(
        update={
            "steps": args.steps,
            "batch_size": args.batch_size,
            "seq_len": args.seq_len,
            "lr": args.lr,
            "seed": args.seed,
            "eval_every": max(1, min(defaults.eval_every, args.steps // 3 or 1)),
            "corpus": defaults.corpus.model_copy(update={"train_bytes": args.train_bytes}),
            "copy_curriculum": defaults.copy_curriculum.model_copy(
                update={"fraction": args.copy_fraction, "warmup_steps": args.copy_warmup_steps}
            ),
            "experts_implementation": args.experts_implementation,
        }
    )
    config = TrainBaseConfig.model_validate(config.model_dump())
    init_dir: Path = args.init or ensure_model(args.out, args.preset, progress=True)
    result = train_base(init_dir, args.out, config)
    print(
        f"{result.steps} steps in {result.seconds:.1f}s: train loss {result.train_loss_first:.3f}"
        f" -> {result.train_loss_last:.3f}, held-out ppl {result.held_out_ppl_init:.1f} -> "
        f"{result.held_out_ppl:.1f}, copy top-1 {result.copy_top1:.2f}"
    )
    print(f"{result.version_id} (parent {result.parent}): {result.checkpoint_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
