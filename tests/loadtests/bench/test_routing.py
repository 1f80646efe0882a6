"""``make bench-routing`` on a small synthetic flywheel run: a real SQLite store written with the
store API (IDE chat requests of the task mix, frontier feedback, verified shadow answers, live
local answers with feedback), the client's labels.json and a switchyard.yaml."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import yaml

from loadtests.bench.routing import items as routing_items
from loadtests.bench.routing import report as rr
from loadtests.bench.routing import run as bench_routing
from rl_loop.outcomes import RecordedOutcome
from tasks.ide import sample_tasks
from traffic.store import (
    FeedbackKind,
    FeedbackRecord,
    InferenceRecord,
    ShadowRecord,
    StoreConfig,
    open_store,
)

# Local accept rates of the synthetic model: the quick questions learnable, the rest not.
LOCAL_P = {"expression_type": 0.92, "return_type": 0.85, "exception_type": 0.75}
BEYOND_P = 0.05
FRONTIER_P = 0.97
SHADOW_SHARE = 0.6
PRICES = {"local": (0.5, 2.5), "frontier": (5.0, 25.0)}
T0 = datetime(2026, 12, 1, tzinfo=UTC)
N_REQUESTS = 1200


def _uuid7(at: datetime, k: int) -> str:
    ms = int(at.timestamp() * 1000)
    value = (ms << 80) | (0x7 << 76) | ((k & 0xFFF) << 64) | (0b10 << 62) | (k * 7919)
    return str(uuid.UUID(int=value))


def _cost(target: str, prompt: int, completion: int) -> float:
    price_in, price_out = PRICES[target]
    return (prompt * price_in + completion * price_out) / 1e6


def _route(k: int, n: int, family: str, rng: random.Random) -> tuple[str, float | None, str]:
    """A production router as the flywheel's: exploration only at first, then a score whose
    threshold sends the two best quick-question families local."""
    if k < n * 0.3:
        target = "local" if rng.random() < 0.05 else "frontier"
        return target, None, f"learned:{target} p_local=none (no scorer fitted yet)"
    p = min(0.99, max(0.01, LOCAL_P.get(family, BEYOND_P) + rng.gauss(0, 0.05)))
    target = "local" if p >= 0.8 or rng.random() < 0.05 else "frontier"
    return target, p, f"learned:{target} p_local={p:.3f} threshold=0.800 scorer=s1"


def _records(n: int, seed: int) -> tuple[list[Any], list[Any], list[Any], dict[str, Any]]:
    rng = random.Random(seed)
    inferences: list[InferenceRecord] = []
    feedback: list[FeedbackRecord] = []
    shadows: list[ShadowRecord] = []
    labels: dict[str, Any] = {}
    for k, task in enumerate(sample_tasks(n, seed)):
        at = T0 + timedelta(seconds=k)
        p_local = LOCAL_P.get(task.family, BEYOND_P)
        target, p_decision, reason = _route(k, n, task.family, rng)
        body = {"model": "auto", "messages": task.messages("ide_chat"), "max_tokens": 160}
        prompt = len(json.dumps(body["messages"])) // 4
        completion = rng.randint(5, 60)
        inf = InferenceRecord(
            id=_uuid7(at, k),
            ts=at,
            endpoint="chat.completions",
            wire_format="openai.chat",
            request=body,
            response={"choices": [{"message": {"content": "x"}}]},
            route_target=target,
            served_model=target,
            weights_version="w1" if target == "local" else None,
            policy_reason=reason,
            status=200,
            latency_ms=10.0,
            prompt_tokens=prompt,
            completion_tokens=completion,
            cost_usd=_cost(target, prompt, completion),
        )
        inferences.append(inf)
        labels[inf.id] = task.labels()
        accepted = rng.random() < (p_local if target == "local" else FRONTIER_P)
        kind: FeedbackKind = "accepted" if accepted else "rejected"
        feedback.append(FeedbackRecord(inference_id=inf.id, ts=at, kind=kind))
        share = SHADOW_SHARE
        if p_decision is not None:  # the gateway's sampler: more where the score is unsure
            share *= 0.25 + 3 * p_decision * (1 - p_decision)
        if target == "frontier" and rng.random() < share:
            verdict = rng.random() < p_local
            comparison: dict[str, Any] = {"completion_tokens": completion, "weights_version": "w1"}
            # the last stretch's shadows carry no verdict: the benchmark verifies their answer
            if k < n * 0.9:
                comparison["verdict"] = verdict
            answer = task.reference_reply if verdict else task.wrong_reply
            shadows.append(
                ShadowRecord(
                    inference_id=inf.id,
                    ts=at,
                    target="local",
                    response={"choices": [{"message": {"content": answer}}]},
                    comparison=comparison,
                )
            )
    return inferences, feedback, shadows, labels


async def _write_store(path: Path, n: int, seed: int) -> dict[str, Any]:
    inferences, feedback, shadows, labels = _records(n, seed)
    store = open_store(StoreConfig(url=f"sqlite:///{path}"))
    await store.connect()
    try:
        await store.insert_inferences(inferences)
        await store.insert_feedback(feedback)
        await store.insert_shadows(shadows)
    finally:
        await store.close()
    return labels


def _config() -> dict[str, Any]:
    backend = {"kind": "vllm", "model": "m", "replicas": ["http://127.0.0.1:1"]}
    return {
        "backends": {
            "local": {
                **backend,
                "input_usd_per_mtok": PRICES["local"][0],
                "output_usd_per_mtok": PRICES["local"][1],
            },
            "frontier": {
                "kind": "litellm",
                "model": "openai/gpt-4o",
                "input_usd_per_mtok": PRICES["frontier"][0],
                "output_usd_per_mtok": PRICES["frontier"][1],
            },
        },
        "routing": {
            "default": "frontier",
            "aliases": {"auto": None},
            "learned": {"local_target": "local", "frontier_target": "frontier", "min_samples": 20},
        },
        "shadow": {"share": SHADOW_SHARE, "target": "local"},
    }


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("flywheel") / "run-20261201T000000"
    run.mkdir()
    labels = asyncio.run(_write_store(run / "traffic.db", N_REQUESTS, seed=5))
    (run / "labels.json").write_text(json.dumps(labels))
    (run / "switchyard.yaml").write_text(yaml.safe_dump(_config()))
    return run


def _run_bench(run: Path, out: Path, *extra: str) -> tuple[dict[str, Any], str]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = bench_routing.main(
            ["--run", str(run), "--out", str(out), "--scorer-calls", "400", *extra]
        )
    assert code == 0
    text = stdout.getvalue()
    return json.loads(text.strip().splitlines()[-1]), text


@pytest.fixture(scope="module")
def bench(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    return _run_bench(run_dir, tmp_path_factory.mktemp("out"))


def test_benchmark_runs_and_its_last_line_is_the_json_report(
    bench: tuple[dict[str, Any], str],
) -> None:
    report, text = bench
    assert "family-oracle" in text and "targets:" in text
    assert report["eval_items"] > 300 and report["paired_items"] > 50
    assert report["shadows_verified_here"] > 10
    assert report["fit_local_weights"] == "w1"
    assert set(report["policies"]) == {
        rr.ALWAYS_FRONTIER,
        rr.ALWAYS_LOCAL,
        rr.RANDOM,
        rr.ORACLE,
        rr.OURS,
        rr.OURS_PRODUCTION,
    }
    assert Path(report["png"]).stat().st_size > 10_000
    assert (Path(report["png"]).parent / "bench-routing.json").exists()
    targets = report["targets"]
    for name in ("auc", "apgr_vs_oracle", "local_share_at_quality_target_vs_oracle"):
        assert isinstance(targets[name]["met"], bool)
    assert "decision_p99_us_16_concurrent" in targets
    assert report["decision_cost"]["concurrent"]["n"] == 400
    # the fit window's outcomes are the refit's: live answers of both arms and shadows
    assert set(report["fit_outcomes"]) == {"local:feedback", "frontier:feedback", "local:shadow"}


def test_fixed_policies_are_the_ends_of_every_curve(bench: tuple[dict[str, Any], str]) -> None:
    policies = bench[0]["policies"]
    frontier, local = policies[rr.ALWAYS_FRONTIER], policies[rr.ALWAYS_LOCAL]
    assert frontier["pgr"] == 1.0 and frontier["local_share"] == 0.0
    assert local["pgr"] == 0.0 and local["local_share"] == 1.0
    assert frontier["meets_quality_target"] and not local["meets_quality_target"]
    assert policies[rr.RANDOM]["apgr"] == pytest.approx(0.5, abs=1e-4)
    # learnable families are told apart from the rest: both ranked policies beat random
    assert policies[rr.ORACLE]["apgr"] > 0.7
    assert policies[rr.OURS]["apgr"] > 0.7
    assert policies[rr.OURS]["auc"] > 0.75
    for name in (rr.ORACLE, rr.OURS):
        assert 0 < policies[name]["local_share"] < 1
        cpt50, cpt80 = (policies[name][f"frontier_share_for_pgr{p}"] for p in (50, 80))
        assert 0 <= cpt50 <= cpt80 <= 1


def test_weights_make_the_items_stand_for_the_evaluation_traffic(
    run_dir: Path, bench: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    report = bench[0]
    labels = json.loads((run_dir / "labels.json").read_text())
    ids = sorted(labels)  # UUIDv7: time order
    evaluated = ids[round(0.6 * len(ids)) :]
    truth = float(np.mean([LOCAL_P.get(labels[i]["family"], BEYOND_P) for i in evaluated]))
    # Horvitz-Thompson: each family's items weigh about as many requests as it sent
    families = report["families"]
    total = sum(f["weight"] for f in families.values())
    assert total == pytest.approx(len(evaluated), rel=0.1)
    for name in LOCAL_P:
        assert families[name]["weight"] == pytest.approx(families[name]["eval_requests"], rel=0.2)
    # this draw's beyond families hold a few heavy accepted shadows: 0.70 against 0.645
    assert report["policies"][rr.ALWAYS_LOCAL]["accept_rate"] == pytest.approx(truth, abs=0.08)
    paired, _ = _run_bench(run_dir, tmp_path, "--paired-only")
    assert paired["eval_items"] == paired["paired_items"] < report["eval_items"]
    # frontier-served requests only: the families the router already sends local are missing
    assert paired["policies"][rr.ALWAYS_LOCAL]["accept_rate"] < truth - 0.1


def test_the_fit_keeps_the_last_served_weights_like_the_refit() -> None:
    def outcome(arm: Literal["local", "frontier"], version: str | None) -> RecordedOutcome:
        return RecordedOutcome("id", "*", arm, True, "feedback", version, 0.0, 0.0)

    outcomes = [outcome("local", None), outcome("frontier", None), outcome("local", "w1")]
    outcomes += [outcome("local", "w2"), outcome("frontier", None), outcome("local", "w2")]
    kept, latest = routing_items.served_weights_only(outcomes)
    assert latest == "w2"
    assert [(o.arm, o.weights_version) for o in kept] == [
        ("frontier", None),
        ("local", "w2"),
        ("frontier", None),
        ("local", "w2"),
    ]


def test_curves_are_monotone_where_they_must_be() -> None:
    rng = np.random.default_rng(3)
    items = []
    for k in range(300):
        family = str(rng.integers(4))
        local_ok = bool(rng.random() < (0.9 if family in "01" else 0.1))
        frontier_ok = bool(rng.random() < 0.95)
        local_cost = 1e-4 * rng.random()
        items.append(
            rr.EvalItem(f"id{k}", family, frontier_ok, local_ok, 1e-3, local_cost, rng.random())
        )
    front, loc = rr.routed_point(items, [False] * 300), rr.routed_point(items, [True] * 300)
    rates = {"0": 0.9, "1": 0.85, "2": 0.1, "3": 0.05}
    for curve in (
        rr.random_curve(items),
        rr.ranked_curve(rr.ORACLE, items, [rates[i.family] for i in items]),
        rr.ranked_curve(rr.OURS, items, [i.p_local for i in items]),
    ):
        assert curve.local_share[0] == 0 and curve.local_share[-1] == 1
        assert np.all(np.diff(curve.local_share) > 0)
        # local is cheaper for every item: cost falls as the local share grows
        assert np.all(np.diff(curve.cost) <= 1e-15)
        assert curve.quality[0] == pytest.approx(front["accept_rate"], abs=1e-4)
        assert curve.quality[-1] == pytest.approx(loc["accept_rate"], abs=1e-4)
    oracle = rr.ranked_curve(rr.ORACLE, items, [rates[i.family] for i in items])
    assert len(oracle.local_share) == 5  # one cut per family
    # families in order of their true rates: quality only falls as more goes local
    assert np.all(np.diff(oracle.quality) <= 1e-12)
    q_l, q_f = loc["accept_rate"], front["accept_rate"]
    assert rr.apgr(rr.random_curve(items), q_l, q_f) == pytest.approx(0.5, abs=1e-3)
    oracle_apgr = rr.apgr(oracle, q_l, q_f)
    assert (
        oracle_apgr is not None and oracle_apgr > 0.65
    )  # ~0.72 expected: two good families of four
    floor = rr.QUALITY_TARGET * q_f
    share = rr.max_local_share(oracle, floor)
    assert oracle.at(share)[0] == pytest.approx(floor, abs=1e-9) or share == 1.0


def test_curve_arithmetic_on_a_hand_worked_case() -> None:
    # 4 items; frontier always right; local right on the two highest scores only
    items = [rr.EvalItem(str(k), "f", True, k < 2, 1.0, 0.0, 1.0 - k / 10) for k in range(4)]
    curve = rr.ranked_curve(rr.OURS, items, [i.p_local for i in items])
    assert curve.quality.tolist() == [1.0, 1.0, 1.0, 0.75, 0.5]
    assert curve.cost.tolist() == [1.0, 0.75, 0.5, 0.25, 0.0]
    # PGR over the frontier share x: 0 at x=0, 0.5 at x=0.25, 1 from x=0.5 on: area 0.75
    assert rr.apgr(curve, 0.5, 1.0) == pytest.approx(0.75)
    assert rr.frontier_share_for_pgr(curve, 0.5, 1.0, 0.5) == pytest.approx(0.25)
    assert rr.frontier_share_for_pgr(curve, 0.5, 1.0, 0.8) == pytest.approx(0.4)
    assert rr.max_local_share(curve, 0.95) == pytest.approx(0.55)


def test_missing_run_names_the_flywheel_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLYWHEEL_DIR", str(tmp_path / "none"))
    assert bench_routing.main([]) == 2
    assert "FLYWHEEL_QUICK=1 make flywheel" in capsys.readouterr().err


def test_default_run_is_the_newest_finished_one(tmp_path: Path) -> None:
    for name in ("run-20261201T000000", "run-20261202T000000", "run-20261203T000000"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "traffic.db").touch()
    (tmp_path / "run-20261202T000000" / "report.json").touch()
    assert bench_routing.newest_run(tmp_path).name == "run-20261202T000000"
