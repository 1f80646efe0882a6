"""The IDE-like workload generator and the replica simulator behind ``make bench-kv``."""

from __future__ import annotations

import itertools
from collections import Counter

from loadtests.kv_workload import KvWorkloadSpec, SegmentTokens, generate, scaled
from loadtests.replica_sim import SimReplicaSpec, _Replica, block_keys_of, simulate
from router.block_hash import BlockHasher
from router.selector_config import CacheAwareConfig, RoundRobinConfig
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


def _run(config, trace, tokens, keys, n=4):  # type: ignore[no-untyped-def]
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
