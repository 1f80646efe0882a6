"""The flywheel's check of the off-policy estimate: the refitted state valued on the round's
record (doubly robust, with an interval, beside the older replay), then judged against the
next round's realised accept rate."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rl_loop.ope_check import coverage, round_estimate
from rl_loop.outcomes import VerdictCache
from rl_loop.refit import fit_state, write_state
from router.learned import Outcome
from tests.rl_loop.test_refit import inference, text, write_config
from traffic.store import FeedbackRecord, SqliteBackend


async def test_the_refitted_state_is_valued_on_the_rounds_record(tmp_path: Path) -> None:
    store = SqliteBackend(tmp_path / "traffic.db")
    await store.connect()
    try:
        since = datetime.now(UTC) - timedelta(seconds=1)
        rows, feedback = [], []
        for i in range(60):  # logged: frontier with 10% exploration; naming passes locally
            local = i % 10 == 0
            rec = dataclasses.replace(
                inference("naming", "local" if local else "frontier", "ok"),
                decision_kind="learned_explore" if local else "learned_frontier",
                decision_propensity=0.1,
            )
            rows.append(rec)
            feedback.append(FeedbackRecord(inference_id=rec.id, kind="accepted"))
        await store.insert_inferences(rows)
        await store.insert_feedback(feedback)
        state_file, config = tmp_path / "state.json", tmp_path / "switchyard.yaml"
        write_config(config, state_file)
        evidence = [Outcome("naming", "local", True, text=text("naming"))] * 400
        write_state(
            fit_state([], "cand", weights_version=None, current_version_only=False, extra=evidence),
            state_file,
        )
        found = await round_estimate(store, config, state_file, VerdictCache(None), since)
        assert found["rows"] == 60 and found["without_propensity"] == 0
        assert found["local_share"] > 0.9  # the candidate sends naming local
        assert found["low"] <= found["estimate"] <= found["high"]
        assert 0.0 <= found["no_overlap"] <= 1.0
        # every verdict accepted; the frontier check's 2% (drawn by the random request ids) are
        # valued at the frontier's smoothed rate, a hair under 1
        assert found["replay_accept"] == pytest.approx(1.0, abs=0.01)
    finally:
        await store.close()


def test_coverage_judges_each_prediction_interval_against_the_next_round() -> None:
    def rnd(index: int, realised: float, ope: dict[str, float] | None) -> dict[str, object]:
        return {"round": index, "overall": {"accept_overall": realised}, "ope": ope or {}}

    first_ope = {"estimate": 0.95, "low": 0.94, "high": 0.96, "replay_accept": 0.99}
    second_ope = {"estimate": 0.9, "low": 0.89, "high": 0.91, "replay_accept": 0.97}
    rounds = [
        rnd(0, 0.9, first_ope | {"window_low": 0.92, "window_high": 0.98}),
        rnd(1, 0.93, second_ope | {"window_low": 0.87, "window_high": 0.92}),
        rnd(2, 0.97, None),
    ]
    (first, second) = coverage(rounds)
    # 0.93 is outside the expected rate's [0.94, 0.96] but inside the window's [0.92, 0.98]
    assert first["covered"] and not first["covered_expected"] and first["realised_next"] == 0.93
    assert first["ope_abs_error"] == pytest.approx(0.02)
    assert first["replay_abs_error"] == pytest.approx(0.06)
    assert not second["covered"] and second["round"] == 1
    assert coverage(rounds[2:]) == []


def test_a_run_recorded_without_a_window_interval_gets_one_at_its_own_row_count() -> None:
    ope = {"estimate": 0.97, "low": 0.968, "high": 0.972, "replay_accept": 0.97}

    def rounds(rows: int) -> list[dict[str, object]]:
        first = {"round": 0, "overall": {}, "ope": ope | {"rows": rows}}
        return [first, {"round": 1, "overall": {"accept_overall": 0.96}}]

    # 0.96 is outside [0.968, 0.972]; for a window of 1,000 requests the binomial sd alone is
    # 0.0054, so 0.01 off is within 1.96 sd; for 100,000 it is not.
    (few,) = coverage(rounds(1000))
    assert few["covered"] and not few["covered_expected"]
    (many,) = coverage(rounds(100_000))
    assert not many["covered"]
