"""The copy curriculum of base training, and the probe that says whether a checkpoint can copy.

Why: an agent task is mostly copying. find_definition copies the symbol from the request into
the search call, then the ``path:line`` from the tool result into the answer. The mechanism that
copies is the induction head (a head that finds the earlier occurrence of the current token and
predicts the token that followed it). On a CPU training budget of stdlib code it does not form
from code alone; windows that only copying can predict make it form, sooner for a copy at a
fixed offset than at a varying one (docs/agent_learnability.md, "A base that copies: the copy
curriculum", has the runs and curves).

A copy window (``copy_windows``) is ``seq_len + 1`` token ids: the first half uniformly random
ids from the tokenizer's ordinary vocabulary (specials never drawn), the second half filled with
segments of ``min_span``..``max_span`` tokens, each copied from a random place in the first half.
Every token of the second half but a segment's first is predictable, by copying only: random ids
carry no prior a model could learn instead. ``CopySpec.fraction`` of each base-training batch
is such windows, the rest stdlib code as before.

The probe (``repeat_figures``): a span A, a gap B, then A again; the loss and top-1 accuracy on
the repeat against the loss on A the first time. A model that copies predicts the repeat almost
perfectly; one that cannot pays for it what it paid the first time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tqdm import tqdm

from serving.training import set_lr


class CopySpec(BaseModel):
    """How much of base training is copy windows (0: none, the code-only training)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction: float = Field(
        default=0.0, ge=0, le=1, description="Share of each batch's windows that are copy windows."
    )
    min_span: int = Field(default=8, ge=2, description="Shortest copied segment (tokens).")
    max_span: int = Field(default=32, ge=2, description="Longest copied segment (tokens).")
    warmup_steps: int = Field(
        default=0, ge=0, description="Steps of short copy windows alone, before any code."
    )
    warmup_window: int = Field(
        default=32, ge=16, description="Tokens per warm-up window (short: see the docstring)."
    )
    warmup_batch_size: int = Field(default=64, ge=1, description="Windows per warm-up step.")
    warmup_lr: float = Field(default=1e-3, gt=0, description="Peak lr of the warm-up.")
    warmup_lr_steps: int = Field(default=100, ge=0, description="Linear lr ramp of the warm-up.")
    extend_windows: tuple[int, ...] = Field(
        default=(),
        description="After the code, copy windows of these lengths, `extend_steps` each, in this "
        "order (growing: the copy reaches as far as the longest).",
    )
    extend_steps: int = Field(default=100, ge=1, description="Steps per extension length.")
    extend_tokens: int = Field(
        default=4096, ge=16, description="Tokens per extension step (windows = tokens // length)."
    )
    extend_lr: float = Field(default=5e-4, gt=0, description="Constant lr of the extension.")

    @model_validator(mode="after")
    def _check_spans(self) -> CopySpec:
        if self.min_span > self.max_span:
            raise ValueError(
                f"min_span ({self.min_span}) must not exceed max_span ({self.max_span})"
            )
        if any(w // 2 < self.min_span for w in self.extend_windows):
            raise ValueError("every extend_windows length must be at least 2 * min_span")
        if self.warmup_steps and self.warmup_window // 2 < self.min_span:
            raise ValueError(
                f"warmup_window ({self.warmup_window}) must be at least twice min_span "
                f"({self.min_span})"
            )
        return self

    def windows_per_batch(self, batch_size: int) -> int:
        """How many of a batch's windows are copy windows (at least one when fraction > 0)."""
        if self.fraction == 0:
            return 0
        return max(1, min(batch_size, round(self.fraction * batch_size)))


#: The recipe the flywheel's base is trained with (``scripts/flywheel.py``): 2,000 warm-up steps
#: (a margin over the copy's escape time, which varies from run to run), then a quarter of each
#: code batch. No extension yet: with code beside it, it has not been run as part of a recipe
#: (docs/agent_learnability.md, "A base that copies: the copy curriculum").
COPY_RECIPE = CopySpec(fraction=0.25, warmup_steps=2000)


def ordinary_ids(vocab_size: int, special_ids: Sequence[int]) -> torch.Tensor:
    """The token ids a copy window may draw: the vocabulary less the special tokens."""
    keep = torch.ones(vocab_size, dtype=torch.bool)
    keep[[i for i in special_ids if 0 <= i < vocab_size]] = False
    return keep.nonzero().flatten()


def copy_windows(
    count: int,
    length: int,
    ids: torch.Tensor,
    spec: CopySpec,
    generator: torch.Generator,
) -> torch.Tensor:
    """``[count, length]`` copy windows (see the module docstring), drawn from ``generator``."""
    half = length // 2
    if half < spec.min_span:
        raise ValueError(f"a window of {length} tokens cannot hold a copy of {spec.min_span}")
    picks = torch.randint(0, len(ids), (count, length), generator=generator)
    windows = ids[picks]
    longest = min(spec.max_span, half)
    for row in range(count):
        pos = half
        while pos < length:
            span = int(torch.randint(spec.min_span, longest + 1, (1,), generator=generator))
            span = min(span, length - pos)
            start = int(torch.randint(0, half - span + 1, (1,), generator=generator))
            windows[row, pos : pos + span] = windows[row, start : start + span]
            pos += span
    return windows


@dataclass(frozen=True)
class CopyPhase:
    """A run of optimizer steps on copy windows alone: ``(window length, windows)`` per step,
    lr ramped linearly to ``peak_lr`` over ``ramp_steps``, then constant."""

    name: str
    schedule: list[tuple[int, int]]
    peak_lr: float
    ramp_steps: int = 0
    with_code: bool = False  # each step also trains on as many code windows of the same length

    def lr(self, step: int) -> float:
        return self.peak_lr * (min(1.0, (step + 1) / self.ramp_steps) if self.ramp_steps else 1.0)


def warmup_phase(spec: CopySpec) -> CopyPhase:
    """Before any code: ``warmup_steps`` steps of short windows, where the copy forms."""
    schedule = [(spec.warmup_window, spec.warmup_batch_size)] * spec.warmup_steps
    return CopyPhase("copy warm-up", schedule, spec.warmup_lr, spec.warmup_lr_steps)


def extend_phase(spec: CopySpec) -> CopyPhase:
    """After the code: ``extend_steps`` steps at each of ``extend_windows`` lengths,
    ``extend_tokens`` tokens a step.

    Why growing lengths: a copy learned in 128-token windows fades with distance, and an
    agent's prompt is ~1,000 tokens; long windows straight away erase the copy, lengths grown
    step by step extend it. Why code beside them: copy windows alone make the base forget code
    and keep only the longest copies; with as many code windows of the same length in each
    step the code loss holds (docs/agent_learnability.md, "A base that copies: the copy
    curriculum")."""
    schedule = [
        (length, max(1, spec.extend_tokens // length))
        for length in spec.extend_windows
        for _ in range(spec.extend_steps)
    ]
    return CopyPhase("copy extension", schedule, spec.extend_lr, with_code=True)


def train_on_copies(
    model: Any,
    optimizer: torch.optim.Optimizer,
    ids: torch.Tensor,
    spec: CopySpec,
    generator: torch.Generator,
    phase: CopyPhase,
    *,
    grad_clip: float,
    code: Callable[[int, int], torch.Tensor] | None = None,
    progress: bool = False,
) -> list[float]:
    """``phase``'s steps (loss on every token, the MoE balance loss included when the model's
    config asks for it); the loss per step. ``code(count, length)`` gives the code windows a
    ``with_code`` phase adds to each step (their loss is added to the copy windows'). ``model``
    is left in train mode."""
    if phase.with_code and code is None:
        raise ValueError(f"{phase.name} trains on code windows too: pass `code`")
    losses: list[float] = []
    model.train()
    bar = tqdm(phase.schedule, desc=phase.name, unit="step", disable=not progress)
    for step, (length, count) in enumerate(bar):
        set_lr(optimizer, phase.lr(step))
        batch = copy_windows(count, length, ids, spec, generator)
        loss = model(input_ids=batch, labels=batch).loss
        if phase.with_code and code is not None:
            text = code(count, length)
            loss = loss + model(input_ids=text, labels=text).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()
        losses.append(float(loss.item()))
        bar.set_postfix(length=length, loss=f"{losses[-1]:.3f}")
    bar.close()
    return losses


def repeat_figures(model: Any, first: torch.Tensor, gap: torch.Tensor) -> dict[str, float]:
    """Loss on ``first`` (each row), then on its repeat after ``gap``; top-1 on the repeat.

    ``model`` is anything called as ``model(input_ids=...)`` that returns ``.logits``."""
    span = first.shape[1]
    sequence = torch.cat([first, gap, first], dim=1)
    with torch.no_grad():
        logits = model(input_ids=sequence).logits[:, :-1].float()
    targets = sequence[:, 1:]
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    ).view(targets.shape)
    start = first.shape[1] + gap.shape[1]  # logits[start - 1] predicts the repeat's first token
    repeat = slice(start, start + span - 1)
    return {
        "first_loss": round(loss[:, : span - 1].mean().item(), 3),
        "repeat_loss": round(loss[:, repeat].mean().item(), 3),
        "repeat_top1": round(
            (logits[:, repeat].argmax(-1) == targets[:, repeat]).float().mean().item(), 3
        ),
    }


def random_repeat_figures(
    model: Any, ids: torch.Tensor, *, span: int, windows: int, seed: int
) -> dict[str, float]:
    """``repeat_figures`` on uniformly random ordinary ids (only copying predicts the repeat)."""
    generator = torch.Generator().manual_seed(seed)
    noise = ids[torch.randint(0, len(ids), (windows, 2 * span), generator=generator)]
    return repeat_figures(model, noise[:, :span], noise[:, span:])
