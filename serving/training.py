"""What every training loop of the project shares: the float32 model loader, AdamW with its
parameter groups, the learning-rate schedule, and the held-out loss they report.

Base training (`serving.train_base`) and the RL loop's SFT and RL phases (`rl_loop.train`) both
use these, so a checkpoint trained by either was optimised the same way:

- Loading. A checkpoint is stored in bf16 (what vLLM serves) and trained in float32, upcast on
  load; its MoE experts run on the kernels `experts_implementation` names (speed only, same
  function).
- Optimiser. AdamW, betas 0.9/0.95, eps 1e-8; decoupled weight decay on matrices only
  (parameters with 2+ dimensions: embeddings, projections, experts), never on norms' gains or
  biases; frozen parameters are left out.
- Held-out loss. Mean next-token cross-entropy (nats) over `[n, seq_len + 1]` token windows
  (input = window[:-1], target = window[1:]); perplexity is its exponential.
- Schedule. Linear warm-up from `peak / warmup_steps` to `peak` over `warmup_steps`, then a cosine
  decay to `min_lr_ratio * peak` at step `steps` (held there afterwards).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Final, Literal

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

#: How transformers computes the MoE experts (its ``experts_implementation``; the values its
#: ``from_pretrained`` documents): ``eager`` loops over the experts, ``batched_mm`` uses
#: ``torch.bmm``, ``grouped_mm`` ``torch.nn.functional.grouped_mm``. Same maths, other kernels.
ExpertsImplementation = Literal["eager", "batched_mm", "grouped_mm"]

#: transformers' own default is ``grouped_mm``; on the CPU its backward pass is about twice as
#: slow as the per-expert loop (docs/training.md, "The experts' kernel"). A GPU run sets
#: ``grouped_mm`` in its config.
DEFAULT_EXPERTS_IMPLEMENTATION: Final[ExpertsImplementation] = "eager"

ADAM_BETAS: Final = (0.9, 0.95)
ADAM_EPS: Final = 1e-8


def load_float32(
    checkpoint_dir: Path,
    experts_implementation: ExpertsImplementation = DEFAULT_EXPERTS_IMPLEMENTATION,
) -> PreTrainedModel:
    """A checkpoint's model in float32, in eval mode, its MoE experts computed as asked."""
    model = AutoModelForCausalLM.from_pretrained(
        str(checkpoint_dir), dtype=torch.float32, experts_implementation=experts_implementation
    )
    assert isinstance(model, PreTrainedModel)
    model.train(False)
    return model


def adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over `model`'s trainable parameters, weight decay on the matrices only."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=ADAM_BETAS, eps=ADAM_EPS)


def warmup_cosine_lr(
    step: int, *, steps: int, peak: float, warmup_steps: int, min_lr_ratio: float
) -> float:
    """The learning rate of 0-based `step` in a run of `steps` (see the module docstring)."""
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, steps - warmup_steps))
    return peak * (min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Every parameter group of `optimizer` steps with `lr` from now on."""
    for group in optimizer.param_groups:
        group["lr"] = lr


@torch.no_grad()
def held_out_loss(model: PreTrainedModel, windows: torch.Tensor, batch_size: int) -> float:
    """Mean next-token cross-entropy (nats) over `windows`; `model`'s train mode is kept."""
    was_training = model.training
    model.train(False)
    total, count = 0.0, 0
    for start in range(0, len(windows), batch_size):
        batch = windows[start : start + batch_size]
        logits = model(input_ids=batch[:, :-1]).logits.float()
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
        )
        total += loss.item()
        count += batch[:, 1:].numel()
    model.train(was_training)
    return total / count
