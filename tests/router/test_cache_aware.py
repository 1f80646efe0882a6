"""The prefix index and the cache-aware scorer: matching, eviction, load and imbalance guards."""

from __future__ import annotations

import random
import statistics
import time
import tracemalloc

import pytest
from pydantic import ValidationError

from router.cache_aware import (
    INDEX_BYTES_PER_BLOCK,
    CacheAwareSelector,
    PrefixIndex,
    ReplicaLoad,
    home_key,
    match_lengths,
)
from router.features import RequestFeatures
from router.kv_events import BlocksRemoved, BlocksStored
from router.replicas import NoHealthyReplicaError, ReplicaView
from router.selector_config import CacheAwareConfig

A, B, C = "http://a:8000", "http://b:8000", "http://c:8000"


def feats(tokens: list[int] | None, episode: str | None = None) -> RequestFeatures:
    kw = {"endpoint": "chat.completions", "requested_model": "m", "prompt_tokens": 0}
    ids = tuple(tokens) if tokens is not None else None
    return RequestFeatures(**kw, episode_id=episode, prompt_token_ids=ids)  # type: ignore[arg-type]


def views(*loads: int, names: tuple[str, ...] = (A, B, C)) -> list[ReplicaView]:
    return [ReplicaView(n, True, load) for n, load in zip(names, loads, strict=False)]


def prompt(seed: int, blocks: int, block_size: int = 32) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(300, 8000) for _ in range(blocks * block_size)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def selector(**kw: object) -> tuple[CacheAwareSelector, Clock]:
    clock = Clock()
    return CacheAwareSelector(CacheAwareConfig.model_validate(kw), clock), clock


# -- PrefixIndex ----------------------------------------------------------------------------


def test_index_evicts_a_prefix_from_its_tail_first() -> None:
    ix = PrefixIndex(default_capacity=4, max_capacity=100)
    ix.add_blocks(0, [1, 2, 3], now=0)
    ix.add_blocks(0, [7, 8], now=0)  # capacity 4: the tail of the older prefix goes first
    assert [ix.owners(k) for k in (1, 2, 3, 7, 8)] == [1, 1, 0, 1, 1]
    assert ix.entries(0) == 4


def test_index_touch_refreshes_recency() -> None:
    ix = PrefixIndex(default_capacity=3, max_capacity=100)
    ix.add_blocks(0, [1, 2], now=0)
    ix.add_blocks(0, [9], now=0)
    ix.add_blocks(0, [1, 2], now=0, present=2)
    ix.add_blocks(0, [5], now=0)  # evicts 9, the least recent
    assert ix.owners(9) == 0 and ix.owners(1) == 1 and ix.owners(2) == 1


def test_index_masks_track_every_replica_and_capacity_is_bounded() -> None:
    ix = PrefixIndex(default_capacity=10, max_capacity=50)
    ix.add_blocks(0, [1, 2], now=0)
    ix.add_blocks(3, [1], now=0)
    assert ix.owners(1) == 0b1001 and ix.owners(2) == 0b0001
    ix.remove_blocks(0, [1])
    assert ix.owners(1) == 0b1000
    ix.set_capacity(0, 10**9)
    assert ix.capacity(0) == 50
    ix.clear_slot(3)
    assert ix.owners(1) == 0


def test_index_ttl_entries_expire() -> None:
    ix = PrefixIndex(default_capacity=10, max_capacity=10, ttl_s=5.0)
    ix.add_blocks(0, [1, 2], now=0.0)
    ix.add_blocks(0, [3], now=3.0)
    ix.expire(now=5.5)
    assert (ix.owners(1), ix.owners(2), ix.owners(3)) == (0, 0, 1)


def test_match_lengths_per_replica() -> None:
    ix = PrefixIndex(100, 100)
    ix.add_blocks(0, [1, 2, 3], now=0)
    ix.add_blocks(1, [1, 2], now=0)
    ix.add_blocks(2, [9], now=0)
    assert match_lengths([1, 2, 3, 4], 0b111, [ix]) == {0: 3, 1: 2}
    assert match_lengths([1, 2, 3], 0b110, [ix]) == {1: 2}
    other = PrefixIndex(100, 100)
    other.add_blocks(1, [3], now=0)
    assert match_lengths([1, 2, 3], 0b111, [ix, other]) == {0: 3, 1: 3}


def test_index_memory_per_block_is_what_we_report() -> None:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ix = PrefixIndex(50_000, 50_000)
        rng = random.Random(0)
        for slot in range(4):
            for _ in range(100):
                ix.add_blocks(slot, [rng.getrandbits(64) for _ in range(100)], now=0)
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert used / ix.total_entries() <= INDEX_BYTES_PER_BLOCK


# -- selector -------------------------------------------------------------------------------


def test_a_repeated_prefix_goes_back_to_its_replica() -> None:
    sel, _ = selector()
    shared = prompt(1, 20)
    first = sel.select_replica("local", views(0, 0, 0), feats(shared + prompt(2, 1)))
    for i in range(5):
        # The first replica now carries a request more: a 20-block match still wins.
        assert sel.select_replica("local", views(1, 0, 0), feats(shared + prompt(10 + i, 2))) == (
            first
        )
        assert sel.last is not None and sel.last.reason == "prefix"
        assert sel.last.matched_blocks == 20


def test_cache_misses_spread_instead_of_piling_on_one_replica() -> None:
    sel, _ = selector()
    chosen = [sel.select_replica("local", views(0, 0, 0), feats(prompt(i, 4))) for i in range(60)]
    counts = [chosen.count(n) for n in (A, B, C)]
    assert min(counts) >= 10, counts


def test_requests_without_tokens_spread() -> None:
    sel, _ = selector()
    chosen = {sel.select_replica("local", views(0, 0, 0), feats(None)) for _ in range(30)}
    assert chosen == {A, B, C}


def test_home_key_is_the_session_or_a_block_stable_while_the_prompt_grows() -> None:
    keys = list(range(1000, 1100))
    assert home_key(keys[:40], "s1") == home_key(keys[:90], "s1") != home_key(keys[:40], "s2")
    # 32 <= len < 64 blocks: block 16; 64 <= len < 128: block 32.
    assert {home_key(keys[:n], None) for n in range(32, 64)} == {keys[16]}
    assert {home_key(keys[:n], None) for n in range(64, 100)} == {keys[32]}
    assert home_key([7], None) == 7 and home_key([], None) is None


def test_a_session_the_index_forgot_goes_home_unless_home_is_much_busier() -> None:
    sel, _ = selector(default_capacity_blocks=8, max_share_ratio=None)
    turn0 = prompt(1, 6)
    home = sel.select_replica("local", views(0, 0, 0), feats(turn0, episode="s1"))

    def forget() -> None:  # other sessions push this one out of the (tiny) index
        for i in range(6):
            other = feats(prompt(50 + i, 6), episode=f"o{i}")
            sel.select_replica("local", views(0, 0, 0), other)
        assert sel.index.owners(sel.hasher.block_keys(turn0)[0]) == 0

    forget()
    turn1 = turn0 + prompt(2, 2)
    loads = {A: 0, B: 0, C: 0}
    loads[home] = 1  # one request busier: 128 tokens < the 256-token home bonus
    vs = [ReplicaView(n, True, v) for n, v in loads.items()]
    assert sel.select_replica("local", vs, feats(turn1, episode="s1")) == home
    assert sel.last is not None and sel.last.reason == "home"
    forget()
    loads[home] = 3  # three busier: 384 tokens > 256
    vs = [ReplicaView(n, True, v) for n, v in loads.items()]
    assert sel.select_replica("local", vs, feats(turn1, episode="s1")) != home
    assert sel.last is not None and sel.last.reason == "load"


def test_sessions_spread_over_their_homes() -> None:
    sel, _ = selector(max_share_ratio=None)
    chosen = [
        sel.select_replica("local", views(0, 0, 0), feats(prompt(i, 4), episode=f"s{i}"))
        for i in range(90)
    ]
    assert min(chosen.count(n) for n in (A, B, C)) >= 18


def test_share_guard_ignores_the_counting_noise_of_a_short_window() -> None:
    sel, _ = selector(max_share_ratio=1.2, share_noise_sd=2.0)
    session = prompt(1, 20)
    two = (A, B)
    home = sel.select_replica("local", views(0, 0, names=two), feats(session, episode="s"))
    for turn in range(4):  # 5 of 5 requests on one replica: 2.2 sd above a fair split of 5
        session = session + prompt(10 + turn, 1)
        assert sel.select_replica("local", views(0, 0, names=two), feats(session)) == home
        assert sel.last is not None and sel.last.guarded == ""


def test_imbalance_guard_beats_any_match() -> None:
    sel, _ = selector(balance_abs_threshold=4, balance_rel_threshold=1.5, max_share_ratio=None)
    shared = prompt(1, 100)
    home = sel.select_replica("local", views(0, 0, 0), feats(shared))
    loads = {A: 0, B: 0, C: 0}
    loads[home] = 10  # > min + 4 and > 1.5 * min
    chosen = sel.select_replica(
        "local", [ReplicaView(n, True, v) for n, v in loads.items()], feats(shared)
    )
    assert chosen != home
    assert sel.last is not None and "imbalance" in sel.last.guarded


def test_load_cost_trades_matched_tokens_against_queue() -> None:
    sel, _ = selector(
        load_cost_tokens=100.0, max_share_ratio=None, balance_abs_threshold=100, home_bonus_tokens=0
    )
    shared = prompt(1, 4)  # 128 tokens matched
    home = sel.select_replica("local", views(0, 0, 0), feats(shared))
    loads = dict.fromkeys((A, B, C), 0)
    loads[home] = 1  # costs 100 tokens, saves 128: stay
    vs = [ReplicaView(n, True, v) for n, v in loads.items()]
    assert sel.select_replica("local", vs, feats(shared)) == home
    loads[home] = 2  # costs 200 tokens, saves 128: leave
    vs = [ReplicaView(n, True, v) for n, v in loads.items()]
    assert sel.select_replica("local", vs, feats(shared)) != home


def test_scraped_load_counts_while_fresh() -> None:
    sel, clock = selector(max_share_ratio=None, load_cost_tokens=1000.0)
    shared = prompt(1, 4)
    home = sel.select_replica("local", views(0, 0, 0), feats(shared))
    sel.update_load(home, ReplicaLoad(running=5, waiting=5, kv_usage=0.1, observed_at=0.0))
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) != home
    clock.now = 100.0  # the reading is stale now: only in-flight counts
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) == home


def test_full_kv_cache_is_avoided() -> None:
    sel, _ = selector(max_share_ratio=None)
    shared = prompt(1, 10)
    home = sel.select_replica("local", views(0, 0, 0), feats(shared))
    sel.update_load(home, ReplicaLoad(0, 0, kv_usage=0.99, observed_at=0.0))
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) != home
    assert sel.last is not None and "kv_usage" in sel.last.guarded


def test_share_guard_spills_a_hot_prefix() -> None:
    sel, _ = selector(max_share_ratio=1.2, share_window_per_replica=64)
    hot = prompt(1, 30)
    chosen = [
        sel.select_replica("local", views(0, 0, 0), feats(hot + prompt(100 + i, 1)))
        for i in range(300)
    ]
    counts = [chosen.count(n) for n in (A, B, C)]
    assert max(counts) / (sum(counts) / 3) < 1.3, counts


def test_share_guard_never_sends_work_to_a_busier_replica() -> None:
    sel, _ = selector(max_share_ratio=1.2, share_window_per_replica=8, balance_abs_threshold=100)
    two = (A, B)
    # A serves most requests because B is slow: B's queue stays long, A's empty.
    for i in range(40):
        sel.select_replica("local", views(0, 9, names=two), feats(prompt(i, 4), episode=f"s{i}"))
    assert sel.last is not None and sel.last.replica == A and sel.last.guarded == ""
    # With equal queues, A's excess share is a hot spot: the guard sends new work to B.
    assert sel.select_replica("local", views(0, 0, names=two), feats(prompt(99, 4))) == B
    assert sel.last is not None and sel.last.guarded == "share"


def test_capacity_follows_the_replica_kv_size() -> None:
    sel, _ = selector(capacity_fraction=0.5, max_index_blocks=1000)
    sel.update_load(A, ReplicaLoad(0, 0, 0.0, 0.0, num_blocks=100, block_size=32))
    sel.update_load(B, ReplicaLoad(0, 0, 0.0, 0.0, num_blocks=10**6, block_size=32))
    assert sel.index.capacity(sel.slot_of(A)) == 50
    assert sel.index.capacity(sel.slot_of(B)) == 1000
    for i in range(20):
        sel.select_replica("local", [ReplicaView(A, True, 0)], feats(prompt(i, 10)))
    assert sel.index_entries()[A] == 50


def test_precise_mode_scores_on_reported_blocks() -> None:
    sel, clock = selector(mode="precise", kv_event_endpoints={A: "tcp://a:5557"}, pending_ttl_s=2.0)
    shared = prompt(1, 8)
    keys = sel.hasher.block_keys(shared)
    sel.apply_kv_events(B, [BlocksStored(tuple(keys), None, "GPU")])
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) == B
    # B evicts it; the routed copy is still pending for 2 s, then only the events count.
    sel.apply_kv_events(B, [BlocksRemoved(tuple(keys), "GPU")])
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) == B
    clock.now = 10.0
    sel.apply_kv_events(C, [BlocksStored(tuple(keys[:4]), None, "GPU")])
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) == C


def test_lost_kv_events_drop_that_replicas_event_index_only() -> None:
    sel, _ = selector(mode="precise", kv_event_endpoints={A: "-", B: "-"}, pending_ttl_s=60.0)
    shared, other = prompt(1, 8), prompt(2, 8)
    sel.apply_kv_events(A, [BlocksStored(tuple(sel.hasher.block_keys(shared)), None, "GPU")])
    sel.apply_kv_events(B, [BlocksStored(tuple(sel.hasher.block_keys(other)), None, "GPU")])
    routed = prompt(3, 8)
    assert sel.select_replica("local", views(0, 0, names=(A, B)), feats(routed)) in (A, B)
    home = sel.last.replica if sel.last else ""
    sel.kv_events_lost(A, 3)
    assert (sel.event_gaps, sel.index_resets) == (3, 1)
    assert sel.index.entries(sel.slot_of(A)) == 0  # A's reported blocks are no longer trusted
    assert sel.index.entries(sel.slot_of(B)) == 8  # B's are
    # What was routed (pending) still scores: the routed prompt goes back to its replica.
    assert sel.select_replica("local", views(0, 0, names=(A, B)), feats(routed)) == home


def test_lost_kv_events_leave_the_approximate_index_alone() -> None:
    sel, _ = selector()
    shared = prompt(1, 8)
    home = sel.select_replica("local", views(0, 0, names=(A, B)), feats(shared))
    sel.kv_events_lost(home, 2)
    assert sel.index.entries(sel.slot_of(home)) == 8


def test_no_healthy_replica() -> None:
    sel, _ = selector()
    with pytest.raises(NoHealthyReplicaError):
        sel.select_replica("local", [ReplicaView(A, False, 0)], feats(prompt(1, 2)))


def test_unhealthy_replicas_are_never_chosen() -> None:
    sel, _ = selector()
    shared = prompt(1, 8)
    home = sel.select_replica("local", views(0, 0, 0), feats(shared))
    vs = [ReplicaView(n, n != home, 0) for n in (A, B, C)]
    assert sel.select_replica("local", vs, feats(shared)) != home


def test_config_is_strict() -> None:
    with pytest.raises(ValidationError):
        CacheAwareConfig.model_validate({"kind": "cache_aware", "blok_size": 16})
    with pytest.raises(ValidationError, match="kv_event_endpoints"):
        CacheAwareConfig(mode="precise")
    with pytest.raises(ValidationError, match="add their event endpoints too"):
        CacheAwareConfig(
            mode="precise",
            kv_event_endpoints={A: "tcp://a:5557"},
            kv_event_replay_endpoints={B: "tcp://b:5558"},
        )


def test_decision_time_at_64_replicas_is_bounded() -> None:
    sel, _ = selector()
    names = tuple(f"http://r{i}:8000" for i in range(64))
    rng = random.Random(0)
    prefixes = [[rng.getrandbits(64) for _ in range(110)] for _ in range(500)]
    vs = [ReplicaView(n, True, rng.randrange(6)) for n in names]
    for _ in range(3000):
        sel.select_for_keys(vs, rng.choice(prefixes)[: rng.randrange(10, 110)], 0.0)
    times = []
    for _ in range(500):
        keys = [*rng.choice(prefixes)[: rng.randrange(10, 110)], rng.getrandbits(64)]
        t0 = time.perf_counter()
        sel.select_for_keys(vs, keys, 0.0)
        times.append(time.perf_counter() - t0)
    # ~40 us on an idle core; generous for a shared CI box.
    assert statistics.median(times) < 1e-3
