"""The cache-aware scorer: prefix match against load, homes, and the guards (the prefix indexes
themselves: tests/router/test_prefix_index.py)."""

from __future__ import annotations

import random
import statistics
import time

import pytest
from pydantic import ValidationError

from router.cache_aware import CacheAwareSelector, ReplicaLoad, home_key
from router.features import RequestFeatures
from router.kv_events import BlocksRemoved, BlocksStored
from router.replicas import LoadBook, NoHealthyReplicaError, ReplicaView
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
    last = sel.last  # re-read: mypy keeps the narrowing of sel.last.reason across the call
    assert last is not None and last.reason == "load"


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
    home = sel.select_replica("local", views(0, 0, 0), feats(prompt(1, 4)))
    sel.update_load(home, ReplicaLoad(running=5, waiting=5, kv_usage=0.1, observed_at=0.0))
    # The gateway's own in-flight counts make `home` the least loaded replica ...
    vs = [ReplicaView(n, True, 0 if n == home else 1) for n in (A, B, C)]
    assert sel.select_replica("local", vs, feats(prompt(2, 4))) != home  # ... but it has 10
    clock.now = 100.0  # the reading is stale now: only in-flight counts
    assert sel.select_replica("local", vs, feats(prompt(3, 4))) == home


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
    # Even the next turn of a session cached on A (the cost term alone would keep it there).
    turn = prompt(39, 4) + prompt(1000, 1)
    assert sel.select_replica("local", views(0, 0, names=two), feats(turn, episode="s39")) == B
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
    shared = prompt(1, 16)
    keys = sel.hasher.block_keys(shared)
    sel.apply_kv_events(B, [BlocksStored(tuple(keys), None, "GPU")])
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) == B
    # B evicts it; the routed copy is still pending for 2 s, then only the events count.
    sel.apply_kv_events(B, [BlocksRemoved(tuple(keys), "GPU")])
    assert sel.select_replica("local", views(0, 0, 0), feats(shared)) == B
    clock.now = 10.0
    # 12 blocks reported on C (384 tokens) outweigh B's home bonus (256).
    sel.apply_kv_events(C, [BlocksStored(tuple(keys[:12]), None, "GPU")])
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


# -- homes, load book -----------------------------------------------------------------------


def test_a_new_session_goes_to_an_idle_replica_not_behind_a_busy_one() -> None:
    sel, _ = selector(max_share_ratio=None)
    chosen = {
        sel.select_replica("local", views(1, 1, 0), feats(prompt(i, 4), episode=f"s{i}"))
        for i in range(20)
    }
    assert chosen == {C}  # no context anywhere: a rendezvous home earns no bonus
    assert sel.last is not None and sel.last.reason == "home"


def test_new_sessions_spread_evenly_and_deterministically() -> None:
    a, _ = selector(max_share_ratio=None)
    b, _ = selector(max_share_ratio=None)
    first = [a.select_replica("local", views(0, 0, 0), feats(prompt(i, 4), episode=f"s{i}"))
             for i in range(60)]  # fmt: skip
    assert min(first.count(n) for n in (A, B, C)) >= 10
    # Another gateway seeing the same loads and traffic places every new session the same way.
    again = [b.select_replica("local", views(0, 0, 0), feats(prompt(i, 4), episode=f"s{i}"))
             for i in range(60)]  # fmt: skip
    assert again == first


def test_a_session_returns_to_where_its_last_request_went() -> None:
    sel, _ = selector(default_capacity_blocks=8, max_share_ratio=None)
    turn0 = prompt(1, 6)
    assert sel.select_replica("local", views(2, 2, 0), feats(turn0, episode="s1")) == C
    for i in range(6):  # other sessions push it out of the (tiny) index
        sel.select_replica("local", views(0, 0, 0), feats(prompt(50 + i, 6), episode=f"o{i}"))
    assert sel.index.owners(sel.hasher.block_keys(turn0)[0]) == 0
    turn1 = turn0 + prompt(2, 2)
    assert sel.select_replica("local", views(0, 0, 1), feats(turn1, episode="s1")) == C
    assert sel.last is not None and sel.last.reason == "home"


def test_approximate_mode_ignores_kv_events() -> None:
    sel, _ = selector()
    keys = tuple(sel.hasher.block_keys(prompt(1, 4)))
    assert sel.apply_kv_events(A, [BlocksStored(keys, None, "GPU")]) == 0
    assert sel.index.owners(keys[0]) == 0


def test_load_book_reuses_readings_until_one_changes_or_turns_stale() -> None:
    book = LoadBook(stale_after_s=5.0)
    vs = views(1, 0, 3)
    slots = book.slots_of(vs)
    assert book.slots_of(views(9, 9, 9)) is slots  # memoised per replica list
    assert book.loads(vs, slots, now=0.0) == [1.0, 0.0, 3.0]
    book.update(B, ReplicaLoad(running=2, waiting=2, kv_usage=0.5, observed_at=0.0))
    book.update(C, ReplicaLoad(running=1, waiting=0, kv_usage=0.2, observed_at=3.0))
    assert book.loads(vs, slots, now=4.0) == [1.0, 4.0, 3.0]
    assert (book.kv_usages(slots, 4.0), book.max_kv_usage(slots, 4.0)) == ([0, 0.5, 0.2], 0.5)
    assert book.loads(vs, slots, now=6.0) == [1.0, 0.0, 3.0]  # B's reading is stale now
    assert book.max_kv_usage(slots, 6.0) == 0.2
    assert book.loads(vs, slots, now=8.5) == [1.0, 0.0, 3.0]  # and C's
    assert book.max_kv_usage(slots, 8.5) == 0.0
    book.update(B, ReplicaLoad(running=0, waiting=7, kv_usage=0.1, observed_at=8.0))
    assert book.loads(vs, slots, now=8.5) == [1.0, 7.0, 3.0]
    assert book.kv_usages(slots, now=2.0) == [0, 0.1, 0.2]  # an earlier clock: C fresh again
