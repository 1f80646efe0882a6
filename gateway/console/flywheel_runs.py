"""Flywheel runs read from the files they write, as data (the gateway does not import the RL
loop: tests/test_architecture.py).

Layout under ``console.flywheel_dir`` (``scripts/flywheel.py``, ``rl_loop.loop``,
``rl_loop.report``)::

    run-<UTC time>/
        report.json           per round: overall / learnable / beyond / per-class figures
                              (local_share, accept_overall, cost_per_1k_usd, latency_p50_ms,
                              ...), the loop's results and the targets; written at the end
        round-<n>/round.json  the round: data counts, RL and SFT phases, gate (passed, reasons),
                              swap (per replica), refit, seconds per phase
        round-<n>/gate.json, gate.txt   the gate's report (candidate vs served, per class)

A run still going has round folders and no ``report.json`` yet. Names are checked (``run-`` and
safe characters; rounds are integers), so a request can only read inside the folder. Every
function here reads files: call it off the event loop.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

RUN_NAME: Final = re.compile(r"run-[A-Za-z0-9_.\-]{1,64}")
ROUND_DIR: Final = re.compile(r"round-(\d{1,6})")


@dataclass(frozen=True, slots=True)
class RoundSummary:
    run: str
    round: int
    candidate: str | None
    promoted: bool | None
    gate_passed: bool | None
    gate_reasons: tuple[str, ...]
    served_before: str | None
    served_after: str | None
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunSummary:
    name: str
    rounds: list[RoundSummary]
    report: dict[str, Any] | None  # report.json, once the run has ended


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def list_runs(root: Path) -> list[str]:
    """Run names, newest first (their names carry the UTC start time)."""
    if not root.is_dir():
        return []
    names = [p.name for p in root.iterdir() if p.is_dir() and RUN_NAME.fullmatch(p.name)]
    return sorted(names, reverse=True)


def _run_dir(root: Path, name: str) -> Path | None:
    if not RUN_NAME.fullmatch(name):
        return None
    path = root / name
    return path if path.is_dir() else None


def _round(name: str, n: int, data: dict[str, Any]) -> RoundSummary:
    gate = data.get("gate") or {}
    return RoundSummary(
        run=name,
        round=n,
        candidate=data.get("candidate"),
        promoted=data.get("promoted"),
        gate_passed=gate.get("passed"),
        gate_reasons=tuple(str(r) for r in gate.get("reasons") or ()),
        served_before=data.get("served_before"),
        served_after=data.get("served_after"),
        seconds={k: float(v) for k, v in (data.get("seconds") or {}).items()},
    )


def read_run(root: Path, name: str) -> RunSummary | None:
    """The run's rounds (in order) and its report; None when there is no such run."""
    path = _run_dir(root, name)
    if path is None:
        return None
    rounds = []
    for child in path.iterdir():
        match = ROUND_DIR.fullmatch(child.name)
        if match is None:
            continue
        data = _read_json(child / "round.json")
        if data is not None:
            rounds.append(_round(name, int(match.group(1)), data))
    rounds.sort(key=lambda r: r.round)
    return RunSummary(name, rounds, _read_json(path / "report.json"))


def read_round(root: Path, name: str, n: int) -> tuple[dict[str, Any], str | None] | None:
    """A round's ``round.json`` and its gate report's text; None when there is none."""
    path = _run_dir(root, name)
    if path is None:
        return None
    data = _read_json(path / f"round-{int(n)}" / "round.json")
    if data is None:
        return None
    try:
        gate_text: str | None = (path / f"round-{int(n)}" / "gate.txt").read_text()
    except OSError:
        gate_text = None
    return data, gate_text


def gate_reports(root: Path) -> dict[str, RoundSummary]:
    """The round that gated each candidate model version, by version id (newest run wins)."""
    out: dict[str, RoundSummary] = {}
    for name in reversed(list_runs(root)):
        run = read_run(root, name)
        for r in run.rounds if run else []:
            if r.candidate:
                out[r.candidate] = r
    return out
