"""`make flywheel` end to end on minimal settings (FLYWHEEL_SMOKE=1): real vLLM with weight
reloads, frontier simulator, gateway with a SQLite store, dataset export, RL + SFT, the gate, a
hot-swap under traffic, the routing refit, and the report with its last-line JSON summary; beside
the chat mix, agent episodes through the same gateway each round (both APIs), their figures
rebuilt from the record, and the agent gate played on the candidate in the sandbox."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_one_round_of_the_flywheel(tmp_path: Path) -> None:
    """Run through the seeds runner (``make flywheel SEEDS=1``): one seed, the run's own report
    in its folder, and the runner's summary of every round as the last line."""
    env = {**os.environ, "FLYWHEEL_SMOKE": "1", "FLYWHEEL_DIR": str(tmp_path), "SEEDS": "1"}
    env.pop("FLYWHEEL_QUICK", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "flywheel_seeds.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    (folder,) = tmp_path.glob("seeds-*")
    log = (folder / "seed-1" / "flywheel.log").read_text() if folder.exists() else ""
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + log[-4000:]
    seeds = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seeds["seeds"] == [1] and seeds["folder"] == str(folder)
    assert json.loads((folder / "seeds.json").read_text()) == seeds
    (one,) = seeds["per_seed"]
    assert len(one["accept_ratio_per_round"]) == 2 and one["failed_requests"] == 0
    assert seeds["overall_accept_ratio_min"] == min(one["accept_ratio_per_round"])
    tmp_path = folder / "seed-1"
    summary = json.loads(log.strip().splitlines()[-1])
    assert summary["preset"] == "smoke" and summary["seed"] == 1 and summary["rounds"] == 1
    assert summary["failed_requests"] == 0
    assert len(summary["local_share"]) == 2
    report = json.loads((tmp_path / "report.json").read_text())
    (loop,) = report["loop"]
    assert loop["sft"]["steps"] > 0 and loop["candidate"].startswith("ft-")
    assert loop["gate"]["candidate"]["n"] > 0
    assert loop["refit"]["reloaded"] is True
    if loop["promoted"]:
        assert loop["swap"]["ok"] and loop["served_after"] == loop["candidate"]
    first = report["rounds"][0]
    assert first["overall"]["requests"] >= 24
    assert first["overall"]["accept_frontier"] is not None
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    assert (tmp_path / "report.txt").read_text().startswith("round")
    agent = summary["agent"]
    assert agent["episodes"] == [4, 4] and agent["failed_requests"] == 0
    assert all(0 <= s <= 1 for s in agent["local_share"])
    (played, last) = report["agent_rounds"]
    assert played["success"]["overall"]["judged"] == 4
    assert played["client"]["episodes"] == 4 and played["client"]["feedback_posted"] == 4
    # The same episodes straight against the frontier: the round's frontier-only reference.
    assert played["paired_frontier"]["episodes"] == 4
    assert played["paired_frontier"]["failed_requests"] == 0
    assert agent["success_paired_frontier_only"][0] == played["paired_frontier"]["success"]
    assert played["gate"]["decision"] in ("promote", "reject") and not last["gate"]
    assert played["gate"]["candidate"]["episodes"] == 1
    assert (tmp_path / "agent_curves.png").stat().st_size > 10_000
    # After the run: the rounds' requests replayed straight to the frontier agree with the record
    # wherever the run served them there, and give each round's paired frontier-only accept.
    replay = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "paired_frontier.py"), str(folder)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert replay.returncode == 0, replay.stderr[-3000:]
    paired = json.loads(replay.stdout.strip().splitlines()[-1])
    assert paired["replay_agrees_with_record"] and paired["agreement"][0]["same"] > 0
    rounds = paired["seeds"][0]["rounds"]
    assert [r["ratio_round0"] for r in rounds] == one["accept_ratio_per_round"]
    assert all(0 < r["paired_frontier_only"] <= 1 for r in rounds)
