"""The request scorer's benchmark (``make bench-routing``'s decision cost, and the model
comparison of ``docs/routing.md``), on the scorer tests' synthetic IDE traffic."""

from __future__ import annotations

from loadtests.bench.routing.scorer import bench_scorer, compare_models
from tests.router.scorer_traffic import heldout_examples, train_examples


def test_logistic_regression_beats_a_constant_predictor_and_naive_bayes_on_log_loss() -> None:
    heldout, _ = heldout_examples()
    rows = {row["model"]: row for row in compare_models(train_examples(), heldout, seed=0)}
    assert set(rows) == {"logreg", "naive_bayes", "constant"}
    assert rows["logreg"]["log_loss"] < rows["constant"]["log_loss"] - 0.1
    assert rows["logreg"]["auc"] > 0.75
    assert rows["logreg"]["log_loss"] < rows["naive_bayes"]["log_loss"]


def test_bench_scorer_reports_request_path_cost_and_size() -> None:
    result = bench_scorer(300)
    assert result["predict_p50_us"] > 0
    assert result["predict_p99_us"] >= result["predict_p50_us"]
    assert result["model_bytes"] == 4 * 2**18
    assert 1400 < result["user_chars"] < 2000
