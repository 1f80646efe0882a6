"""The reference model on two ranks under FSDP2 (issue 46, item 4), two CPU processes over gloo
(``scripts/reference_ranks.py --gloo 2``): loaded as the trainers load it (rank 1 a meta
skeleton) and prepared as they prepare it, every rank's gathered parameters equal rank 0's plain
copy and so do its logits. TRL's root-only preparation after transformers' loader, what the
trainers did before, leaves rank 1's half of every tensor zero: the check must see that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two processes importing transformers: ~30 s on a shared 2-core box
def test_the_reference_is_the_checkpoint_on_both_ranks(micro_model: Path) -> None:
    script = REPO / "scripts" / "reference_ranks.py"
    command = [sys.executable, str(script), "--checkpoint", str(micro_model)]
    proc = subprocess.run(
        [*command, "--gloo", "2", "--also-trl"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ok"] and report["world"] == 2
    for rank in report["ranks"]:
        assert rank["max_rel_diff"] == 0.0 and rank["zeroed_params"] == 0
        assert rank["logits_max_abs_diff"] <= 1e-5
        assert rank["shard_units"] > 1  # one per decoder layer, plus embeddings and the tail
    before = report["trl_root_only"]
    assert not before["ok"]
    assert all(r["shard_units"] == 1 and r["max_rel_diff"] > 0.1 for r in before["ranks"])
