"""The base-training corpus: which stdlib files train and which are held out, and their token
windows (steps 1-2 of the algorithm in :mod:`serving.train_base`).

1. Corpus. The Python standard library's own `.py` files (nothing is downloaded). Each file goes
   to the held-out split when the first 8 bytes of SHA-256(`split_salt` + its path relative to
   the stdlib root), read as an integer, fall below `held_out_fraction` of 2**64; otherwise it
   is a training file. The split depends only on the path, never on how many files exist or
   their order, so it is the same on every machine with the same Python version.
2. Token stream. Files, each cut to `max_bytes_per_file`, are tokenized with the checkpoint's
   own tokenizer and concatenated with `<|endoftext|>` between documents until a byte budget is
   reached, then cut into non-overlapping windows of `seq_len + 1` tokens.
"""

from __future__ import annotations

import hashlib
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from transformers import PreTrainedTokenizerFast

from serving.tokenizer import ENDOFTEXT, stdlib_sources


class CorpusSpec(BaseModel):
    """Which source files feed training and evaluation, and how much of them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    held_out_fraction: float = Field(default=0.05, gt=0, lt=1, description="Files held out.")
    split_salt: str = Field(default="switchyard-base-v1", description="Changes the split.")
    max_bytes_per_file: int = Field(default=16_000, ge=1_000, description="Cap per file.")
    train_bytes: int = Field(default=1_000_000, ge=10_000, description="Training text bound.")
    held_out_bytes: int = Field(default=100_000, ge=5_000, description="Held-out text bound.")


def is_held_out(relative_path: str, spec: CorpusSpec) -> bool:
    """Step 1 of the algorithm: the deterministic split of one file."""
    digest = hashlib.sha256(f"{spec.split_salt}\0{relative_path}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < spec.held_out_fraction * 2**64


def split_files(spec: CorpusSpec, files: Sequence[Path] | None = None) -> tuple[list[Path], ...]:
    """(training files, held-out files) of the stdlib (or of `files`), each sorted."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chosen = sorted(stdlib_sources() if files is None else files)
    train: list[Path] = []
    held_out: list[Path] = []
    for path in chosen:
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
        (held_out if is_held_out(name, spec) else train).append(path)
    return train, held_out


def token_windows(
    tokenizer: PreTrainedTokenizerFast,
    files: Sequence[Path],
    *,
    max_bytes: int,
    max_bytes_per_file: int,
    seq_len: int,
) -> torch.Tensor:
    """Step 2: `[n, seq_len + 1]` int64 windows of the files' concatenated token stream."""
    separator = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    assert isinstance(separator, int)
    stream: list[int] = []
    total = 0
    for path in files:
        if total >= max_bytes:
            break
        try:
            raw = path.read_bytes()[: min(max_bytes_per_file, max_bytes - total)]
        except OSError:
            continue
        total += len(raw)
        stream += tokenizer(raw.decode("utf-8", errors="ignore"))["input_ids"]
        stream.append(separator)
    n = len(stream) // (seq_len + 1)
    if n == 0:
        raise ValueError(f"corpus of {len(stream)} tokens is shorter than one window")
    return torch.tensor(stream[: n * (seq_len + 1)], dtype=torch.long).view(n, seq_len + 1)


def corpus_windows(
    tokenizer: PreTrainedTokenizerFast,
    split: Literal["train", "held_out"],
    *,
    seq_len: int,
    max_bytes: int | None = None,
    spec: CorpusSpec | None = None,
) -> torch.Tensor:
    """`[n, seq_len + 1]` windows of the corpus's `train` files (replay against forgetting) or
    its `held_out` ones (perplexity, drift, probes), as base training splits them; at most
    `max_bytes` of text (the spec's held-out size by default)."""
    spec = spec or CorpusSpec()
    train, held_out = split_files(spec)
    return token_windows(
        tokenizer,
        held_out if split == "held_out" else train,
        max_bytes=spec.held_out_bytes if max_bytes is None else max_bytes,
        max_bytes_per_file=spec.max_bytes_per_file,
        seq_len=seq_len,
    )
