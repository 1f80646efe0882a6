"""Baselines (round-robin, least-load, session affinity) and the selector factory."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import TypeAdapter, ValidationError

from router.cache_aware import CacheAwareSelector, ReplicaLoad
from router.features import RequestFeatures
from router.replicas import NoHealthyReplicaError, ReplicaView
from router.selector_config import (
    LeastLoadConfig,
    SelectorConfig,
    SessionAffinityConfig,
)
from router.selectors import (
    HashRing,
    LeastLoadSelector,
    RoundRobin,
    SessionAffinitySelector,
    build_selector,
)

NAMES = [f"http://r{i}:8000" for i in range(4)]


def feats(episode: str | None = None, api_key: str | None = None) -> RequestFeatures:
    return RequestFeatures(
        endpoint="chat.completions",
        requested_model="m",
        prompt_tokens=10,
        episode_id=episode,
        api_key_id=api_key,
    )


def views(loads: list[int] | None = None, down: set[str] | None = None) -> list[ReplicaView]:
    loads = loads or [0] * len(NAMES)
    return [
        ReplicaView(n, n not in (down or set()), load) for n, load in zip(NAMES, loads, strict=True)
    ]


def test_factory_builds_each_kind_from_yaml_like_dicts() -> None:
    adapter: TypeAdapter[SelectorConfig] = TypeAdapter(SelectorConfig)
    kinds = {
        "round_robin": RoundRobin,
        "least_load": LeastLoadSelector,
        "session_affinity": SessionAffinitySelector,
        "cache_aware": CacheAwareSelector,
    }
    for kind, cls in kinds.items():
        assert isinstance(build_selector(adapter.validate_python({"kind": kind})), cls)
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "random"})
    with pytest.raises(ValidationError):
        adapter.validate_python({"kind": "least_load", "typo": 1})


def test_round_robin_ignores_observations() -> None:
    rr = RoundRobin()
    rr.update_load(NAMES[0], ReplicaLoad(9, 9, 0.9, 0.0))
    assert rr.apply_kv_events(NAMES[0], []) == 0
    got = [rr.select_replica("t", views(), feats()) for _ in range(8)]
    assert Counter(got) == dict.fromkeys(NAMES, 2)


def test_least_load_picks_the_emptiest_and_rotates_ties() -> None:
    sel = LeastLoadSelector(LeastLoadConfig(), clock=lambda: 0.0)
    assert sel.select_replica("t", views([3, 1, 2, 5]), feats()) == NAMES[1]
    sel.update_load(NAMES[1], ReplicaLoad(running=4, waiting=4, kv_usage=0.5, observed_at=0.0))
    assert sel.select_replica("t", views([3, 1, 2, 5]), feats()) == NAMES[2]
    tied = {sel.select_replica("t", views([0, 9, 0, 9]), feats()) for _ in range(4)}
    assert tied == {NAMES[0], NAMES[2]}
    with pytest.raises(NoHealthyReplicaError):
        sel.select_replica("t", views(down=set(NAMES)), feats())


def test_session_affinity_is_sticky_and_moves_only_failed_sessions() -> None:
    sel = SessionAffinitySelector(SessionAffinityConfig())
    sessions = [f"s{i}" for i in range(400)]
    home = {s: sel.select_replica("t", views(), feats(episode=s)) for s in sessions}
    assert all(sel.select_replica("t", views(), feats(episode=s)) == home[s] for s in sessions)
    share = Counter(home.values())
    assert max(share.values()) / (len(sessions) / len(NAMES)) < 1.3, share
    down = NAMES[0]
    moved = {s: sel.select_replica("t", views(down={down}), feats(episode=s)) for s in sessions}
    assert all(moved[s] == home[s] for s in sessions if home[s] != down)
    assert all(moved[s] != down for s in sessions)
    # It comes back: its sessions return to it.
    assert all(sel.select_replica("t", views(), feats(episode=s)) == home[s] for s in sessions)


def test_session_affinity_keys_and_fallback() -> None:
    by_key = SessionAffinitySelector(SessionAffinityConfig(key="api_key"))
    a = by_key.select_replica("t", views(), feats(episode="x", api_key="k1"))
    assert by_key.select_replica("t", views(), feats(episode="y", api_key="k1")) == a
    sel = SessionAffinitySelector(SessionAffinityConfig())
    keyless = {sel.select_replica("t", views(), feats()) for _ in range(8)}
    assert keyless == set(NAMES)


def test_hash_ring_spreads_keys() -> None:
    ring = HashRing(NAMES, virtual_nodes=160)
    got = Counter(ring.lookup(f"k{i}", set(NAMES)) for i in range(4000))
    assert min(got.values()) > 800
    assert ring.lookup("k", set()) is None
