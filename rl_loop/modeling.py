"""The trained model as the RL loop sees it: load, encode chat turns, sample, save.

Token layout. A prompt is the checkpoint's own chat template rendered with the generation prompt
(exactly what vLLM renders for ``/v1/chat/completions``); a completion is the answer's tokens
plus ``<|im_end|>``, tokenized apart from the prompt, which is how a served model produces them.
Scoring tokens for training is ``rl_loop.scoring``'s.

Saving. ``save_checkpoint`` writes the weights in the checkpoint's dtype (bf16, what vLLM serves)
beside byte-identical tokenizer files, with a probe (the saved weights' own logprobs of a fixed
prompt) for the hot-swap check, through ``serving.build``'s staging and naming.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import JsonValue
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from serving.base_corpus import corpus_windows
from serving.build import (
    copy_tokenizer_files,
    finalize_checkpoint,
    read_version,
    save_hf_model,
    staging_dir,
)
from serving.logprob_probe import probe_reference
from serving.tokenizer import ENDOFTEXT, IM_END, load_tokenizer
from serving.training import DEFAULT_EXPERTS_IMPLEMENTATION, ExpertsImplementation, load_float32

Message = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Encoded:
    """One prompt and completion as token ids."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]


class Policy:
    """A causal LM in float32 with its tokenizer and the ids the loop needs."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, source: Path):
        self.model = model
        self.tokenizer = tokenizer
        self.source = source
        eos = tokenizer.convert_tokens_to_ids(IM_END)
        pad = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
        assert isinstance(eos, int) and isinstance(pad, int)
        self.eos_id = eos
        self.pad_id = pad

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode_prompt(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> tuple[int, ...]:
        text = self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tools=[dict(t) for t in tools] if tools else None,
            tokenize=False,
            add_generation_prompt=True,
        )
        assert isinstance(text, str)
        return tuple(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_completion(self, text: str) -> tuple[int, ...]:
        ids: list[int] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return (*ids, self.eos_id)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def clone(self) -> Policy:
        """A frozen copy (the KL reference), in eval mode without gradients."""
        model = copy.deepcopy(self.model)
        model.train(False)
        for p in model.parameters():
            p.requires_grad_(False)
        return Policy(model, self.tokenizer, self.source)


def load_policy(
    checkpoint_dir: Path,
    device: str = "cpu",
    experts_implementation: ExpertsImplementation = DEFAULT_EXPERTS_IMPLEMENTATION,
) -> Policy:
    """The checkpoint's model in float32 on ``device`` (train mode), its MoE experts computed
    as ``experts_implementation`` says (``LoopConfig``), and its tokenizer."""
    model = load_float32(checkpoint_dir, experts_implementation)
    model.to(device)  # type: ignore[arg-type]
    return Policy(model, load_tokenizer(checkpoint_dir), checkpoint_dir)


@lru_cache(maxsize=8)
def code_windows(
    tokenizer_dir: str, split: Literal["train", "held_out"], seq_len: int, max_bytes: int
) -> torch.Tensor:
    """:func:`serving.base_corpus.corpus_windows` for a checkpoint's tokenizer, kept: the loop
    reads the same windows every round."""
    tokenizer = load_tokenizer(Path(tokenizer_dir))
    return corpus_windows(tokenizer, split, seq_len=seq_len, max_bytes=max_bytes)


@torch.no_grad()
def generate(
    policy: Policy,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    batch_size: int = 32,
    seed: int = 0,
) -> list[tuple[int, ...]]:
    """Completions of ``prompts`` (ids, ending at ``<|im_end|>`` when the model stopped).

    Greedy when ``temperature`` is 0. Prompts are processed in batches of similar length, left
    padded as ``transformers.generate`` expects.
    """
    model = policy.model
    was_training = model.training
    model.train(False)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    out: dict[int, tuple[int, ...]] = {}
    try:
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            longest = max(len(prompts[i]) for i in chunk)
            ids = torch.full((len(chunk), longest), policy.pad_id, dtype=torch.long)
            attention = torch.zeros((len(chunk), longest), dtype=torch.long)
            for row, i in enumerate(chunk):
                p = prompts[i]
                ids[row, longest - len(p) :] = torch.tensor(list(p))
                attention[row, longest - len(p) :] = 1
            kwargs: dict[str, Any] = {"do_sample": temperature > 0}
            if temperature > 0:
                kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + start)
                result = model.generate(  # type: ignore[operator]
                    input_ids=ids.to(policy.device),
                    attention_mask=attention.to(policy.device),
                    max_new_tokens=max_new_tokens,
                    eos_token_id=[policy.eos_id, policy.pad_id],
                    pad_token_id=policy.pad_id,
                    **kwargs,
                )
            for row, i in enumerate(chunk):
                new = result[row, longest:].tolist()
                out[i] = tuple(_until_stop(new, policy.eos_id, policy.pad_id))
    finally:
        model.train(was_training)
    return [out[i] for i in range(len(prompts))]


def _until_stop(ids: list[int], eos: int, pad: int) -> list[int]:
    for n, t in enumerate(ids):
        if t in (eos, pad):
            return ids[: n + 1] if t == eos else ids[:n]
    return ids


def save_checkpoint(
    policy: Policy,
    out_dir: Path,
    *,
    kind: str,
    seed: int | None,
    metadata: dict[str, JsonValue],
    eval_figures: dict[str, float] | None = None,
) -> Path:
    """Save ``policy`` as a new version under ``out_dir`` (parent: the checkpoint it was loaded
    from) and return its directory ``<out_dir>/<kind>-<digest>``."""
    parent = read_version(policy.source)
    with staging_dir(out_dir) as staging:
        saved = copy.deepcopy(policy.model).to(getattr(torch, parent.spec.dtype)).cpu()
        save_hf_model(saved, staging)  # type: ignore[arg-type]
        copy_tokenizer_files(policy.source, staging)
        probe = probe_reference(load_float32(staging), policy.tokenizer)
        return finalize_checkpoint(
            staging,
            out_dir,
            kind=kind,
            parent=parent.version_id,
            spec=parent.spec,
            seed=seed,
            metadata=metadata,
            eval=eval_figures,
            probe=probe,
        )
