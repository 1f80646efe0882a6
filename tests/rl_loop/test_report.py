"""The flywheel report's figures: cost re-weighted to a mix and the targets built on it."""

from __future__ import annotations

from typing import Any

import pytest

from rl_loop.report import (
    Figures,
    RoundFigures,
    beyond_bound,
    caught,
    check_targets,
    mix_cost_per_1k,
    round_figures,
)
from rl_loop.seed_report import seed_summary


def _round(index: int, per_class: dict[str, tuple[int, int, float]]) -> RoundFigures:
    """A round where each class has (requests, local requests, total cost USD)."""
    figures = {}
    for name, (requests, local, cost) in per_class.items():
        f = Figures(requests=requests, local=local, cost_usd=cost, latencies_ms=[10.0])
        f.judged_frontier, f.accepted_frontier = requests - local, requests - local
        f.judged_local, f.accepted_local = local, local
        figures[name] = f
    return round_figures(index, "v", "p", figures, ["quick"], client_errors=0)


def test_reweighting_removes_how_many_tasks_of_each_class_were_drawn() -> None:
    # per request: quick $0.001 then $0.0001 (served locally), heavy $0.002 both rounds
    first = _round(0, {"quick": (10, 0, 0.010), "heavy": (90, 0, 0.180)})
    last = _round(1, {"quick": (90, 90, 0.009), "heavy": (10, 0, 0.020)})
    assert mix_cost_per_1k(first, {"quick": 0.5, "heavy": 0.5}) == pytest.approx(1.5)
    assert mix_cost_per_1k(last, {"quick": 0.5, "heavy": 0.5}) == pytest.approx(1.05)
    assert mix_cost_per_1k(last, {"quick": 0.5, "missing": 0.5}) is None
    targets = check_targets(
        [first, last], ["quick"], 0.05, 0, mixes={"even": {"quick": 0.5, "heavy": 0.5}}
    )
    # as measured, most of the drop comes from drawing more cheap requests in the last round
    assert targets["cost_per_1k_drop"]["first"] == pytest.approx(1.9)
    assert targets["cost_per_1k_drop"]["last"] == pytest.approx(0.29)
    even = targets["cost_per_1k_drop_reweighted"]["even"]
    assert even["drop"] == pytest.approx(1 - 1.05 / 1.5)


def test_without_mixes_the_targets_have_no_reweighted_entry() -> None:
    first = _round(0, {"quick": (10, 0, 0.010)})
    assert "cost_per_1k_drop_reweighted" not in check_targets([first, first], ["quick"], 0.05, 0)


def _judged(index: int, accepted: int, beyond_local: int) -> RoundFigures:
    """100 quick requests (``accepted`` of them accepted, all frontier) and 200 beyond ones
    (``beyond_local`` local, all accepted)."""
    quick = Figures(requests=100, latencies_ms=[10.0], cost_usd=0.1)
    quick.judged_frontier, quick.accepted_frontier = 100, accepted
    beyond = Figures(requests=200, local=beyond_local, latencies_ms=[10.0], cost_usd=0.2)
    beyond.judged_frontier, beyond.accepted_frontier = 200 - beyond_local, 200 - beyond_local
    beyond.judged_local, beyond.accepted_local = beyond_local, beyond_local
    return round_figures(index, "v", "p", {"quick": quick, "beyond": beyond}, ["quick"], 0)


def test_every_round_is_judged_not_only_the_last() -> None:
    # round 1 dips (85 of 100 quick accepted) and sends 30 of 200 beyond requests local; the
    # last round is fine: the run-level targets are missed anyway
    rounds = [_judged(0, 100, 10), _judged(1, 85, 30), _judged(2, 100, 10)]
    targets = check_targets(rounds, ["quick"], 0.05, 0)
    assert targets["overall_accept_vs_frontier_only"]["met"]  # the last round alone
    every = targets["overall_accept_every_round"]
    assert every["min"] == pytest.approx(285 / 300) and every["met"]
    dipped = check_targets([_judged(0, 100, 10), _judged(1, 70, 10)], ["quick"], 0.05, 0)
    assert not dipped["overall_accept_every_round"]["met"]
    beyond = targets["beyond_local_share_every_round"]
    bound = beyond_bound(0.05, 200)
    assert beyond["bound_per_round"] == [round(bound, 4)] * 3
    assert beyond["per_round"][1] == 0.15 > bound and not beyond["met"]
    assert beyond_bound(0.05, 200) == pytest.approx(0.05 + 3 * (0.05 * 0.95 / 200) ** 0.5)


def _report(seed: int, rounds: list[RoundFigures]) -> dict[str, object]:
    """A run's report.json as the seed summary reads it."""
    return {
        "seed": seed,
        "settings": {"exploration_share": 0.05},
        "rounds": [r.to_json() for r in rounds],
        "targets": check_targets(rounds, ["quick"], 0.05, 0),
    }


def test_the_seed_summary_takes_the_worst_round_of_every_seed() -> None:
    report = _report
    good = report(0, [_judged(0, 100, 10), _judged(1, 100, 10)])
    dip = report(1, [_judged(0, 100, 10), _judged(1, 70, 40), _judged(2, 100, 10)])
    summary = seed_summary([good, dip])
    assert summary["seeds"] == [0, 1]
    assert summary["overall_accept_ratio_min"] == pytest.approx(270 / 300)
    assert not summary["overall_accept_met"]
    assert summary["beyond_share_excess_max"] == pytest.approx(0.2 - beyond_bound(0.05, 200))
    assert not summary["beyond_share_met"]
    assert summary["agent_success_ratio_min"] is None and not summary["agent_success_met"]
    assert [s["accept_ratio_per_round"] for s in summary["per_seed"]][1][1] == round(0.9, 4)
    assert seed_summary([good])["overall_accept_met"] and seed_summary([good])["beyond_share_met"]


def test_releases_are_judged_by_their_harm_and_the_injected_candidates_rollback() -> None:
    def release(
        round_index: int, status: str, by: str, harm: float, injected: bool
    ) -> dict[str, Any]:
        return {
            "round": round_index,
            "status": status,
            "decided_by": by,
            "timed_out": by == "flywheel",
            "injected": {"family": "quick"} if injected else None,
            "figures": {"harm": harm},
        }

    def report(seed: int, releases: list[dict[str, Any]]) -> dict[str, object]:
        rounds = [_judged(i, 100, 10) for i in range(len(releases) + 1)]
        for r, rel in zip(rounds, releases, strict=False):
            r.release = rel
        return _report(seed, rounds)

    caught = report(0, [release(0, "promoted", "release-monitor", 0.004, False),
                        release(1, "rolled_back", "release-monitor", 0.03, True)])  # fmt: skip
    timed_out = report(1, [release(0, "rolled_back", "flywheel", 0.002, True)])
    targets = caught["targets"]
    assert isinstance(targets, dict)
    harm = targets["canary_harm_every_round"]
    assert harm["max"] == 0.03 and not harm["met"]  # the bad candidate's harm counts too
    assert targets["injected_bad_candidate_rolled_back"]["met"]
    summary = seed_summary([caught, timed_out])
    assert summary["canary_harm_max"] == 0.03 and not summary["canary_harm_met"]
    # rolled back by the loop at the end of its traffic, not by the test: not caught
    assert summary["injected_rolled_back"] == [True, False] and not summary["injected_met"]
    assert [len(s["releases"]) for s in summary["per_seed"]] == [2, 1]


def test_a_release_is_caught_only_when_rolled_back_on_evidence() -> None:
    monitor = {"status": "rolled_back", "decided_by": "release-monitor"}
    shadow = {
        "status": "rolled_back",
        "decided_by": "flywheel",
        "shadow": {"regressions": {"naming": {}}},
    }
    timeout = {"status": "rolled_back", "decided_by": "flywheel", "shadow": {"routing": "fit"}}
    promoted = {"status": "promoted", "decided_by": "release-monitor"}
    assert [caught(r) for r in (monitor, shadow, timeout, promoted)] == [True, True, False, False]
