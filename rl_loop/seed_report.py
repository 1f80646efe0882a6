"""Several flywheel runs (one per seed) read together: the safety targets hold in every round of
every seed, never only in the last round of one.

Each input is a run's ``report.json`` (``rl_loop.report.write_report``). Figures:
- ``overall_accept_ratio_min``: min over (seed, round) of accept overall / that seed's
  frontier-only accept (target >= 0.95);
- ``beyond_share_excess_max``: max over (seed, round) of the beyond-model families' local
  share minus its bound (exploration share + 3 binomial standard deviations at that round's
  count, ``rl_loop.report.beyond_bound``; target <= 0);
- ``agent_success_ratio_min``: min over (seed, round) of agent episode success / frontier-only
  success on the same episodes (``rl_loop.agent_report``; round 0's where a run has no paired
  reference; target >= 0.95), and ``agent_success_ratio_vs_round0_min`` beside it;
- ``ope_coverage``: over (seed, round) pairs with an off-policy estimate, the share whose 95%
  prediction interval (for a window of the estimated round's size) covers the next round's
  realised accept rate (target >= 0.9; beside it, labelled, ``ope_coverage_expected``: the
  interval for the expected rate), with the mean absolute error of the estimate and of the
  older replay preview (``rl_loop.ope_check``);
- ``canary_harm_max``: max over every release of every seed of the candidate's share times
  live's accept minus the candidate's on the requests the arms could answer differently
  (target <= 0.01), and ``injected_rolled_back``: whether each seed's injected bad candidate
  was rolled back by the release monitor within its round;
- per seed, the cost of the safety: learnable families local by the last round, cost per 1k
  drop, the first round whose learnable families' local share reaches 0.8, failed requests,
  and each release's outcome.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rl_loop.ope_check import coverage
from rl_loop.report import beyond_bound, caught

LEARNED_SHARE = 0.8  # a learnable family counts as gone local from this local share on


def seed_summary(reports: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One JSON-able summary of the runs' reports (module docstring)."""
    accept: list[float] = []
    excess: list[float] = []
    agent: list[float] = []
    agent_round0: list[float] = []
    per_seed: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    harms: list[float] = []
    injected: list[bool] = []
    for report in reports:
        targets = report["targets"]
        rounds = report["rounds"]
        eps = float(report["settings"]["exploration_share"])
        accept += targets["overall_accept_every_round"]["ratio_per_round"]
        for r in rounds:
            share = float(r["beyond"].get("local_share") or 0.0)
            excess.append(share - beyond_bound(eps, int(r["beyond"].get("requests") or 0)))
        agent_every = targets.get("agent", {}).get("agent_success_every_round", {})
        agent += agent_every.get("ratio_per_round", [])
        agent_round0 += agent_every.get("ratio_vs_round0_per_round", [])
        gone = [
            r["round"]
            for r in rounds
            if float(r["learnable"].get("local_share") or 0.0) >= LEARNED_SHARE
        ]
        drop = targets["cost_per_1k_drop"]["drop"]
        checked = coverage(rounds)
        checks += checked
        releases = [r["release"] for r in rounds if r.get("release")]
        harms += [h for r in releases if (h := r["figures"].get("harm")) is not None]
        injected += [caught(r) for r in releases if r.get("injected")]
        per_seed.append(
            {
                "seed": report.get("seed"),
                "run_dir": report.get("run_dir"),
                "wall_s": report.get("wall_s"),
                "learnable_met": targets["learnable_classes_met"],
                "all_learnable": all(
                    c["met"] for c in targets["learnable_local_share_and_quality"].values()
                ),
                "cost_drop": drop,
                "first_round_learnable_local": gone[0] if gone else None,
                "failed_requests": targets["zero_failed_client_requests"]["failed"],
                "accept_ratio_per_round": targets["overall_accept_every_round"]["ratio_per_round"],
                "beyond_share_per_round": [r["beyond"].get("local_share") for r in rounds],
                "agent_ratio_per_round": agent_every.get("ratio_per_round"),
                "ope": checked,
                "releases": [
                    {k: r.get(k) for k in ("round", "status", "decided_by", "timed_out")}
                    | {"harm": r["figures"].get("harm"), "injected": bool(r.get("injected"))}
                    for r in releases
                ],
            }
        )
    cost_met = all(
        s["all_learnable"]
        and s["cost_drop"] is not None
        and s["cost_drop"] >= 0.5
        and s["failed_requests"] == 0
        for s in per_seed
    )
    return {
        "seeds": [s["seed"] for s in per_seed],
        "overall_accept_ratio_min": min(accept) if accept else None,
        "overall_accept_met": bool(accept) and min(accept) >= 0.95,
        "beyond_share_excess_max": max(excess) if excess else None,
        "beyond_share_met": bool(excess) and max(excess) <= 0,
        "agent_success_ratio_min": min(agent) if agent else None,
        "agent_success_met": bool(agent) and min(agent) >= 0.95,
        "agent_success_ratio_vs_round0_min": min(agent_round0) if agent_round0 else None,
        "cost_of_safety_met": bool(per_seed) and cost_met,
        "canary_harm_max": max(harms) if harms else None,
        "canary_harm_met": bool(harms) and max(harms) <= 0.01,
        "injected_rolled_back": injected,
        "injected_met": len(injected) == len(per_seed) and all(injected),
        "ope_pairs": len(checks),
        "ope_coverage": _mean([float(c["covered"]) for c in checks]),
        "ope_coverage_met": bool(checks) and sum(c["covered"] for c in checks) >= 0.9 * len(checks),
        "ope_coverage_expected": _mean([float(c["covered_expected"]) for c in checks]),
        "ope_abs_error_mean": _mean([c["ope_abs_error"] for c in checks]),
        "replay_abs_error_mean": _mean([c["replay_abs_error"] for c in checks]),
        "per_seed": per_seed,
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
