"""A user's key forgotten while a flywheel run is under way (`scripts/forget_during_flywheel.py`,
the smoke preset): nothing of the key is left in the store, the spool or the trainer's export,
the checkpoint trained on it is tainted and refused, the audit entry holds no content, and the
run's clients saw no failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_forgetting_a_key_during_a_flywheel_run_leaves_nothing_and_fails_nothing(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "FLYWHEEL_DIR": str(tmp_path)}
    env.pop("FLYWHEEL_QUICK", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "forget_during_flywheel.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    (folder,) = tmp_path.glob("forget-*")
    log = (folder / "flywheel.log").read_text()
    assert proc.stdout.strip(), proc.stderr[-3000:] + log[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    brief = {k: v for k, v in result.items() if k not in ("side_ids", "recorded_before")}
    assert result["ok"] and proc.returncode == 0, brief
    assert result["side_requests"] == len(result["side_ids"]) > 0
    assert result["forget_report"]["database"]["inferences"] == result["side_requests"]
    # The round's candidate learned from the key's records: tainted, and refused.
    assert result["tainted_expected"] and result["refused"] == result["tainted_expected"]
    assert result["exports_holding_key_before"] and result["forget_report"]["exports"]["rows"] > 0
    assert result["flywheel_failed_requests"] == 0 and result["flywheel_exit"] == 0
