"""Can a checkpoint copy? The induction probe behind docs/agent_learnability.md.

An agent task such as find_definition is two copies: the symbol from the request into the
search call, the ``path:line`` from the tool result into the answer. A model that can copy
predicts a span it has already seen in its context far better the second time. The probe
measures that directly, on text of two kinds:

    code    ``windows`` held-out stdlib windows (the base-training split,
            ``serving.train_base``): each is the first ``span`` tokens A, the next ``span``
            tokens B, then A again. The loss on the repeat of A against the loss on A the first
            time, and the top-1 accuracy on the repeat.
    random  the same with uniformly random token ids (no prior can help: only copying lowers
            the repeat's loss).

A model with induction heads shows a repeat loss far below the first and a top-1 near 1; a
model without shows the two about equal. Prints one JSON line.

    .venv/bin/python scripts/copy_probe.py .cache/models/tiny/pretrain-ae7e49ecdfd7
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerFast

from serving.base_corpus import corpus_windows
from serving.copy_curriculum import random_repeat_figures, repeat_figures
from serving.training import load_float32


def probe(checkpoint: Path, span: int, windows: int, seed: int) -> dict[str, object]:
    tokenizer = PreTrainedTokenizerFast.from_pretrained(checkpoint)
    model = load_float32(checkpoint)
    code = corpus_windows(tokenizer, "held_out", seq_len=2 * span - 1)[:windows]
    every_id = torch.arange(len(tokenizer))
    return {
        "checkpoint": str(checkpoint),
        "span": span,
        "windows": len(code),
        "code": repeat_figures(model, code[:, :span], code[:, span:]),
        "random": random_repeat_figures(model, every_id, span=span, windows=len(code), seed=seed),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/copy_probe.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("checkpoints", type=Path, nargs="+")
    parser.add_argument("--span", type=int, default=40, help="Tokens in the copied span.")
    parser.add_argument("--windows", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for checkpoint in args.checkpoints:
        print(json.dumps(probe(checkpoint, args.span, args.windows, args.seed)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
