"""The IDE-like workload generator and the replica simulator behind ``make bench-kv``."""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from loadtests.kv.replica_sim import (
    RequestOutcome,
    SimReplicaSpec,
    SimResult,
    _Replica,
    block_keys_of,
    pooled_lru_hit_rate,
    run_over_seeds,
    run_policies,
    simulate,
)
from loadtests.kv.workload import KvRequest, KvWorkloadSpec, SegmentTokens, generate, scaled
from router.block_hash import BlockHasher
from router.selector_config import (
    CacheAwareConfig,
    RoundRobinConfig,
    SelectorConfig,
    SessionAffinityConfig,
)
from router.selectors import build_selector

SPEC = KvWorkloadSpec(sessions=120, clients=6, repos=12, session_rate=2.0, seed=3)


def test_trace_is_deterministic_and_ordered() -> None:
    a, b = generate(SPEC), generate(SPEC)
    assert a == b
    assert all(x.arrival_s <= y.arrival_s for x, y in itertools.pairwise(a))
    assert generate(KvWorkloadSpec(sessions=120, seed=4)) != a


def test_conversations_grow_turn_by_turn_on_a_shared_prefix() -> None:
    trace = generate(SPEC)
    tokens = SegmentTokens(SPEC)
    by_session: dict[str, list[list[int]]] = {}
    for r in sorted(trace, key=lambda r: (r.session, r.turn)):
        by_session.setdefault(r.session, []).append(tokens.prompt_ids(r))
    grown = [p for p in by_session.values() if len(p) > 1]
    assert grown
    for prompts in grown:
        for prev, cur in itertools.pairwise(prompts):
            assert len(cur) > len(prev) and cur[: len(prev)] == prev
    first = trace[0]
    head = SPEC.system_tokens + SPEC.repo_tokens
    same_repo = [r for r in trace if (r.client, r.repo) == (first.client, first.repo)]
    assert len({tuple(tokens.prompt_ids(r)[:head]) for r in same_repo}) == 1


def test_repository_popularity_is_skewed() -> None:
    counts = Counter(r.repo for r in generate(SPEC))
    top, *_ = counts.most_common()
    assert top[1] > 3 * len(generate(SPEC)) / SPEC.repos / 2


def test_prompt_cap_and_scaling() -> None:
    capped = generate(KvWorkloadSpec(sessions=50, max_prompt_tokens=3600, seed=1))
    assert all(r.prompt_tokens + r.max_tokens <= 3600 for r in capped)
    fast = scaled(capped, 2.0)
    assert fast[-1].arrival_s == capped[-1].arrival_s / 2


def test_replica_cache_is_an_lru_evicting_tails_first() -> None:
    replica = _Replica("r", capacity=4)
    assert replica.admit([1, 2, 3]) == (0, [1, 2, 3], [])
    assert replica.admit([1, 2, 9]) == (2, [9], [])
    hit, stored, evicted = replica.admit([5, 6])
    assert (hit, stored) == (0, [5, 6]) and set(evicted) == {3, 9}


def _run(
    config: SelectorConfig,
    trace: Sequence[KvRequest],
    tokens: SegmentTokens,
    keys: Sequence[array[int]],
    n: int = 4,
) -> SimResult:
    clock = [0.0]
    selector = build_selector(config, clock=lambda: clock[0])
    return simulate("p", selector, trace, tokens, keys, n, SimReplicaSpec(cache_blocks=600), clock)


def test_queueing_and_caching_show_in_ttft() -> None:
    trace = generate(SPEC)
    tokens = SegmentTokens(SPEC)
    keys = block_keys_of(trace, tokens, BlockHasher(32))
    rr = _run(RoundRobinConfig(), trace, tokens, keys)
    ours = _run(CacheAwareConfig(), trace, tokens, keys)
    assert ours.hit_rate > 2 * rr.hit_rate
    assert ours.ttft_p50_s < rr.ttft_p50_s
    assert ours.max_mean_requests < 1.3
    busy = _run(RoundRobinConfig(), scaled(trace, 20.0), tokens, keys)
    assert busy.ttft_p90_s > 3 * rr.ttft_p90_s  # same work, 20x the rate: queues


def test_outcomes_say_where_each_request_went_and_why_its_ttft() -> None:
    trace = generate(SPEC)[:60]
    tokens = SegmentTokens(SPEC)
    keys = block_keys_of(trace, tokens, BlockHasher(32))
    clock = [0.0]
    outcomes: list[RequestOutcome] = []
    selector = build_selector(CacheAwareConfig(), clock=lambda: clock[0])
    result = simulate("p", selector, trace, tokens, keys, 4, SimReplicaSpec(), clock,
                      outcomes=outcomes)  # fmt: skip
    assert len(outcomes) == len(trace)
    cached = sum(o.cached_tokens for o in outcomes)
    assert cached / sum(o.prompt_tokens for o in outcomes) == result.hit_rate
    assert all(0 <= o.replica < 4 and o.queued_s >= 0 and o.ttft_s > o.queued_s for o in outcomes)


def test_every_policy_runs_on_the_same_trace_with_a_pooled_reference() -> None:
    trace = generate(SPEC)
    tokens = SegmentTokens(SPEC)
    keys = block_keys_of(trace, tokens, BlockHasher(32))
    spec = SimReplicaSpec(cache_blocks=300)
    configs: dict[str, SelectorConfig] = {"rr": RoundRobinConfig(), "ours": CacheAwareConfig()}
    results = run_policies(configs, trace, tokens, keys, 2, spec)
    assert set(results) == {"rr", "ours"} and results["ours"].extra["index_blocks_max"] > 0
    pooled = pooled_lru_hit_rate(trace, keys, 600, 32)
    assert 0 < results["rr"].hit_rate < pooled <= pooled_lru_hit_rate(trace, keys, 10**6, 32)


def test_hit_rates_over_seeds_and_ratios_from_their_means() -> None:
    draws = {seed: replace(SPEC, sessions=30, seed=seed) for seed in (1, 2)}
    configs: dict[str, SelectorConfig] = {
        "round_robin": RoundRobinConfig(),
        "session_affinity": SessionAffinityConfig(),
        "ours": CacheAwareConfig(),
    }
    runs = run_over_seeds(configs, draws, 2, SimReplicaSpec(cache_blocks=300))
    report = runs.summary("ours")
    assert report["seeds"] == [1, 2] and len(runs.pooled_lru) == 2
    means = {k: sum(r.hit_rate for r in v) / 2 for k, v in runs.runs.items()}
    assert report["ours_vs_round_robin"] == round(means["ours"] / means["round_robin"], 3)
    per_seed = report["ours_vs_round_robin_per_seed"]
    assert isinstance(per_seed, list) and len(per_seed) == 2
