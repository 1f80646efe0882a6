"""How every trainer of the loop scores tokens: the log-probability of each labelled token, and
nothing it does not need.

Layout. A batch is transformers' and TRL's: right-padded ``input_ids [B, T]`` and ``labels
[B, T]``, ``-100`` where a token is not scored; the label at position ``t`` is predicted by the
hidden state at ``t - 1``. Scores come back as ``[B, T - 1]`` (0 where nothing is scored), so a
trainer's per-token terms (rollout logprobs, advantages, teacher logprobs) line up with them.
With a causal mask, padding after a sequence changes nothing before it: no attention mask is
passed and the fast causal attention path is kept.

Why not the model's own forward. The LM head (vocabulary x hidden) is most of a small model's
compute, and a prompt (~200 tokens) is much longer than its answer: the head is applied only at
the positions that predict a labelled token. And every IDE prompt starts with the same system
prompt, about half of a quick question's tokens: when the rows of a batch share a prefix of at
least ``MIN_SHARED_PREFIX`` tokens it runs once (batch 1, its KV cache repeated) and only the
rest per row: the same hidden states and gradients as one full pass, for about half the
compute. (TRL's own SFT step, whose fused LM head scores every position on the CPU and which
runs the whole prefix per row, took 59-89 s for 30 steps of 16 IDE examples on the tiny model
where this scoring took 3-31 s; a shared 2-core box, so the spread is other jobs'.)

Distribution. Trainers call the model through the wrapper accelerate gives them (DDP, FSDP,
DeepSpeed), so that its gradient hooks fire: ``add_completion_scoring`` makes
``model(input_ids=..., labels=..., completion_scoring=True)`` run this scoring and return a
:class:`CompletionScores`, as TRL's ``add_fused_lm_head`` does for its own head; without the
flag the forward is the original one (generation is unchanged). Optional parts computed in the
same forward: the full log-distribution at the labelled positions (``log_dists=True``, for
distillation terms) and a plain language-modelling loss on token windows (``lm_windows``, the
replay of code against forgetting), so each optimizer step is one forward through the wrapper.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel
from transformers.utils.generic import ModelOutput

from rl_loop.modeling import Encoded

IGNORE_INDEX = -100  # transformers' and TRL's label of an unscored position
MIN_SHARED_PREFIX = 16  # tokens; below this a shared-prefix pass saves less than it costs


@dataclass(frozen=True, slots=True)
class Batch:
    """Right-padded ``input_ids [B, T]`` and ``labels [B, T]`` (see the module docstring)."""

    input_ids: torch.Tensor
    labels: torch.Tensor

    @property
    def mask(self) -> torch.Tensor:
        """``[B, T - 1]``: which next-token positions are scored."""
        return self.labels[:, 1:] != IGNORE_INDEX


def make_batch(seqs: Sequence[Encoded], pad_id: int, device: torch.device) -> Batch:
    """Right-pad prompt + completion sequences into a :class:`Batch` whose labels are the
    completion tokens."""
    total = max(len(s.prompt_ids) + len(s.completion_ids) for s in seqs)
    ids = torch.full((len(seqs), total), pad_id, dtype=torch.long)
    labels = torch.full((len(seqs), total), IGNORE_INDEX, dtype=torch.long)
    for i, s in enumerate(seqs):
        full = s.prompt_ids + s.completion_ids
        ids[i, : len(full)] = torch.tensor(full)
        labels[i, len(s.prompt_ids) : len(full)] = torch.tensor(s.completion_ids)
    return Batch(ids.to(device), labels.to(device))


def _module(model: PreTrainedModel, getter: str) -> Any:
    """``model.get_decoder()`` or ``model.get_output_embeddings()`` (looked up on each call:
    PEFT and FSDP replace the modules)."""
    return getattr(model, getter)()


def shared_prefix_length(input_ids: torch.Tensor) -> int:
    """How many leading columns of ``input_ids [B, T]`` are the same in every row."""
    same = (input_ids == input_ids[:1]).all(dim=0)
    differs = (~same).nonzero()
    return int(differs[0, 0]) if len(differs) else input_ids.shape[1]


def hidden_states(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """The decoder's last hidden states ``[B, T, H]`` (no LM head), a shared prefix run once."""
    decoder = _module(model, "get_decoder")
    shared = shared_prefix_length(input_ids)
    # Gradient checkpointing turns the KV cache off during training: one full pass then.
    checkpointed = bool(getattr(model, "is_gradient_checkpointing", False)) and model.training
    if (
        checkpointed
        or len(input_ids) < 2
        or shared < MIN_SHARED_PREFIX
        or shared >= input_ids.shape[1]
    ):
        hidden: torch.Tensor = decoder(input_ids=input_ids, use_cache=False).last_hidden_state
        return hidden
    head = decoder(input_ids=input_ids[:1, :shared], use_cache=True)
    cache = head.past_key_values
    cache.batch_repeat_interleave(len(input_ids))
    rest = decoder(input_ids=input_ids[:, shared:], past_key_values=cache, use_cache=True)
    prefix = head.last_hidden_state.expand(len(input_ids), -1, -1)
    return torch.cat([prefix, rest.last_hidden_state], dim=1)


def _labelled_logits(model: PreTrainedModel, batch: Batch, hidden: torch.Tensor) -> torch.Tensor:
    """Logits ``[N, V]`` at the ``N`` scored positions (row-major order), in float32."""
    head = _module(model, "get_output_embeddings")
    picked = hidden[:, :-1][batch.mask]
    logits: torch.Tensor = head(picked.to(head.weight.dtype)).float()
    return logits


def lm_loss(model: PreTrainedModel, windows: torch.Tensor) -> torch.Tensor:
    """Mean next-token loss over token windows ``[n, L + 1]`` (plain language modelling)."""
    hidden = hidden_states(model, windows[:, :-1])
    head = _module(model, "get_output_embeddings")
    logits = head(hidden).float()
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)
    )


@dataclass
class CompletionScores(ModelOutput):  # type: ignore[misc]
    """What ``model(..., completion_scoring=True)`` returns (see the module docstring)."""

    log_probs: torch.Tensor | None = None  # [B, T - 1], 0 where nothing is scored
    label_mask: torch.Tensor | None = None  # [B, T - 1]
    log_dists: torch.Tensor | None = None  # [N, V] at the scored positions, when asked
    lm_loss: torch.Tensor | None = None  # mean next-token loss of ``lm_windows``, when given


def score(
    model: PreTrainedModel,
    batch: Batch,
    *,
    log_dists: bool = False,
    lm_windows: torch.Tensor | None = None,
) -> CompletionScores:
    """Score ``batch`` on an unwrapped model (the patched forward's body): the labels'
    log-probabilities, and optionally the full log-distributions at the scored positions and
    the language-modelling loss of ``lm_windows``."""
    mask = batch.mask
    logits = _labelled_logits(model, batch, hidden_states(model, batch.input_ids))
    all_logp = torch.log_softmax(logits, dim=-1)
    picked = all_logp.gather(-1, batch.labels[:, 1:][mask].unsqueeze(-1))[:, 0]
    return CompletionScores(
        # masked_scatter keeps the result connected to the model even when nothing is scored.
        log_probs=picked.new_zeros(mask.shape).masked_scatter(mask, picked),
        label_mask=mask,
        log_dists=all_logp if log_dists else None,
        lm_loss=lm_loss(model, lm_windows) if lm_windows is not None and len(lm_windows) else None,
    )


def label_logprobs(model: PreTrainedModel, batch: Batch) -> torch.Tensor:
    """log p(label | everything before it), ``[B, T - 1]`` (0 where nothing is scored)."""
    log_probs = score(model, batch).log_probs
    assert log_probs is not None
    return log_probs


def add_completion_scoring(model: PreTrainedModel) -> None:
    """Patch ``model.forward``: with ``completion_scoring=True`` it returns :func:`score`'s
    :class:`CompletionScores`; without, it is the original forward. Patch the base model, before
    wrapping it with PEFT; the decoder and head are looked up on each call (PEFT and FSDP replace
    them). Patching twice is a no-op."""
    if getattr(model, "_completion_scoring", False):
        return

    @functools.wraps(type(model).forward)
    def forward(
        self: PreTrainedModel,
        *args: Any,
        completion_scoring: bool = False,
        log_dists: bool = False,
        lm_windows: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> Any:
        if not completion_scoring:
            # The class's forward, not a captured bound method: a deep copy of the model (the
            # frozen reference, a saved checkpoint) must run its own weights.
            return type(self).forward(self, *args, **kwargs)
        batch = Batch(kwargs["input_ids"], kwargs["labels"])
        return score(self, batch, log_dists=log_dists, lm_windows=lm_windows)

    model.forward = types.MethodType(forward, model)  # type: ignore[method-assign]
    model._completion_scoring = True  # type: ignore[assignment]


def restore_forward(model: PreTrainedModel) -> None:
    """Drop every instance-level patch of ``model.forward`` (ours, TRL's fused head): the
    class's forward again, as a loaded model has. A patch's closure may hold the model it was
    made for, which a deep copy (the frozen reference, a saved checkpoint) must not call."""
    model.__dict__.pop("forward", None)
    model.__dict__.pop("_completion_scoring", None)
