"""`scripts/copy_probe.py`: a model that copies shows it on the repeated span, a model that
cannot shows the repeat no better than the first time (the tiny random init)."""

from __future__ import annotations

from typing import Any

import torch

from scripts.copy_probe import probe
from serving.build import ensure_model
from serving.copy_curriculum import repeat_figures
from tests.fixtures.vllm_fixture import cache_dir


class _Copier(torch.nn.Module):
    """Predicts, at each position, the token that followed the previous occurrence of the
    current token (what an induction head does); uniform where the token is new."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab

    def forward(self, input_ids: torch.Tensor) -> Any:
        logits = torch.zeros(*input_ids.shape, self.vocab)
        for row, ids in enumerate(input_ids.tolist()):
            after: dict[int, int] = {}
            for i, token in enumerate(ids):
                if token in after:
                    logits[row, i, after[token]] = 30.0
                if i + 1 < len(ids):
                    after[token] = ids[i + 1]
        return type("Output", (), {"logits": logits})()


def test_a_model_that_copies_predicts_the_repeated_span() -> None:
    generator = torch.Generator().manual_seed(0)
    first = torch.randperm(500, generator=generator)[:80].view(2, 40)  # no token repeats
    gap = torch.randint(500, 1000, (2, 40), generator=generator)
    figures = repeat_figures(_Copier(1000), first, gap)  # type: ignore[arg-type]
    assert figures["repeat_top1"] == 1.0
    assert figures["repeat_loss"] < 0.01 < 6 < figures["first_loss"]


def test_the_random_init_cannot_copy() -> None:
    init = ensure_model(cache_dir() / "models", "tiny")
    figures = probe(init, span=16, windows=4, seed=0)
    for kind in ("code", "random"):
        f = figures[kind]
        assert isinstance(f, dict)
        assert f["repeat_top1"] < 0.1
        assert abs(f["repeat_loss"] - f["first_loss"]) < 0.5
