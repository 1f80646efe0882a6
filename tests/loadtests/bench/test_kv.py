"""``make bench-kv``'s trace shapes and its verdict on the targets (the simulated parts; the real
part runs in tests/gateway/test_kv_aware_vllm.py)."""

from __future__ import annotations

from loadtests.bench.kv.report import (
    OURS,
    TARGET_DECISION_US,
    TARGET_HIT_VS_ROUND_ROBIN,
    TARGET_MAX_MEAN_LOAD,
    near_saturation,
    targets,
)
from loadtests.bench.kv.run import TRACE_SHAPES, shared_workload
from loadtests.kv.replica_sim import (
    SimReplicaSpec,
    SimResult,
    block_keys_of,
    run_over_seeds,
    run_policies,
)
from loadtests.kv.workload import SegmentTokens, generate, scaled
from router.block_hash import BlockHasher
from router.selector_config import (
    CacheAwareConfig,
    RoundRobinConfig,
    SelectorConfig,
    SessionAffinityConfig,
)

CONFIGS: dict[str, SelectorConfig] = {
    "round_robin": RoundRobinConfig(),
    "session_affinity": SessionAffinityConfig(),
    OURS: CacheAwareConfig(),
}


def _contexts_per_session(shape: str) -> float:
    """Sessions per distinct (system prompt, repository) context of a 60-session draw."""
    trace = generate(TRACE_SHAPES[shape](60, 1))
    contexts = {(r.client, r.repo) for r in trace}
    return len({r.session for r in trace}) / len(contexts)


def test_shared_repos_shape_shares_repository_contexts_between_sessions() -> None:
    assert _contexts_per_session("per_session") < 1.1  # one context per session, nearly
    assert _contexts_per_session("shared_repos") > 2.0
    shared = shared_workload(60, 1)
    assert shared.clients == 4 and shared.repo_tokens == 2048
    assert TRACE_SHAPES["per_session"](60, 1).seed == shared.seed == 1


def _sim(
    sizes: tuple[int, ...], levels: tuple[float, ...]
) -> dict[int, dict[float, dict[str, SimResult]]]:
    workload = shared_workload(30, 2)
    trace, tokens = generate(workload), SegmentTokens(workload)
    keys = block_keys_of(trace, tokens, BlockHasher(32))
    spec = SimReplicaSpec(cache_blocks=200)
    return {
        n: {f: run_policies(CONFIGS, scaled(trace, f), tokens, keys, n, spec) for f in levels}
        for n in sizes
    }


def test_targets_judge_every_part_at_its_worst_level() -> None:
    sim = _sim((2, 3), (1.0, 8.0))
    draws = {seed: shared_workload(20, seed) for seed in (1, 2)}
    seeds = {"shared_repos": run_over_seeds(CONFIGS, draws, 2, SimReplicaSpec(cache_blocks=200))}
    cost = {"decision_us_p50": TARGET_DECISION_US / 2, "decision_us_p99": TARGET_DECISION_US * 3}
    verdict = targets({}, sim, cost, seeds)

    ratio = verdict["hit_rate_vs_round_robin"]
    assert set(ratio) == {"sim2_shared_repos", "sim2", "sim3"}
    worst = min(row[OURS].hit_rate / row["round_robin"].hit_rate for row in sim[3].values())
    assert ratio["sim3"] == {"value": round(worst, 3), "met": worst >= TARGET_HIT_VS_ROUND_ROBIN}
    runs = seeds["shared_repos"]
    from_means = runs.mean_hit(OURS) / runs.mean_hit("round_robin")
    assert ratio["sim2_shared_repos"]["value"] == round(from_means, 3)

    points = verdict["hit_rate_minus_session_affinity_points"]["sim2"]["value"]
    assert points == round(
        min(100 * (r[OURS].hit_rate - r["session_affinity"].hit_rate) for r in sim[2].values()), 3
    )
    balance = verdict["max_mean_load"]["sim3"]
    most = max(r[OURS].max_mean_requests for r in sim[3].values())
    assert balance == {"value": round(most, 3), "met": most <= TARGET_MAX_MEAN_LOAD}

    ttft = verdict["ttft_p90"]
    f = near_saturation(sim[3])
    assert f in (1.0, 8.0) and f"sim3_x{f}_vs_round_robin" in ttft
    assert set(verdict["decision_us"]) == {"synthetic_decision_us_p50", "synthetic_decision_us_p99"}
    assert verdict["decision_us"]["synthetic_decision_us_p50"]["met"] is True
    assert verdict["decision_us"]["synthetic_decision_us_p99"]["met"] is False


def test_near_saturation_is_where_round_robin_leaves_its_floor() -> None:
    levels = _sim((2,), (1.0, 4.0, 30.0))[2]
    light = levels[1.0]["round_robin"].ttft_p90_s
    f = near_saturation(levels)
    assert levels[f]["round_robin"].ttft_p90_s >= 5 * light or f == 30.0
    assert all(levels[g]["round_robin"].ttft_p90_s < 5 * light for g in levels if g < f)
