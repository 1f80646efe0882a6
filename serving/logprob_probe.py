"""The logprob probe of a checkpoint: its logprobs of one fixed prompt, stored with the
checkpoint, which every replica serving it must reproduce after a hot-swap (:mod:`serving.hotswap`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from serving.build import read_version
from serving.model_config import ProbeReference
from serving.tokenizer import load_tokenizer
from serving.training import load_float32

#: The fixed prompt of every checkpoint's `probe` (code, like the served traffic).
PROBE_TEXT = (
    "def fibonacci(n: int) -> int:\n"
    '    """Return the n-th Fibonacci number."""\n'
    "    a, b = 0, 1\n"
    "    for _ in range(n):\n"
    "        a, b = b, a + b\n"
    "    return a\n"
)


@torch.no_grad()
def token_logprobs(model: PreTrainedModel, token_ids: Sequence[int]) -> list[float]:
    """log p(token_ids[i + 1] | token_ids[: i + 1]) for every i, in float32 math."""
    ids = torch.tensor([list(token_ids)], dtype=torch.long)
    logits = model(input_ids=ids).logits[0, :-1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(1, ids[0, 1:, None])
    return [float(v) for v in picked[:, 0]]


def probe_reference(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast) -> ProbeReference:
    """The model's logprobs of `PROBE_TEXT` (what a replica must reproduce after a swap)."""
    ids: list[int] = tokenizer(PROBE_TEXT)["input_ids"]
    return ProbeReference(prompt_token_ids=tuple(ids), logprobs=tuple(token_logprobs(model, ids)))


def checkpoint_probe(checkpoint_dir: Path) -> ProbeReference:
    """The checkpoint's stored `probe`, or one computed from its weights if it has none."""
    stored = read_version(checkpoint_dir).probe
    if stored is not None:
        return stored
    return probe_reference(load_float32(checkpoint_dir), load_tokenizer(checkpoint_dir))
