"""The flywheel report's figures: cost re-weighted to a mix and the targets built on it."""

from __future__ import annotations

import pytest

from rl_loop.report import Figures, RoundFigures, check_targets, mix_cost_per_1k, round_figures


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
