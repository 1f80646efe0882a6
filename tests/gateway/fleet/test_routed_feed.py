"""The cache-aware decisions two gateways exchange: applied by the other, a decision makes its
selector find the same prefix and the same session home and count the same share of requests
per replica; the queue is bounded; a gateway's own
batches come back to it and are skipped."""

from __future__ import annotations

import random

from gateway.fleet.routed_feed import RoutedFeed
from router.cache_aware import CacheAwareSelector
from router.features import RequestFeatures
from router.replicas import ReplicaView
from router.selector_config import CacheAwareConfig

REPLICAS = ("http://a:8000", "http://b:8000", "http://c:8000")


def features(tokens: list[int], episode: str | None = None) -> RequestFeatures:
    kw = {"endpoint": "chat.completions", "requested_model": "m", "prompt_tokens": len(tokens)}
    return RequestFeatures(**kw, episode_id=episode, prompt_token_ids=tuple(tokens))  # type: ignore[arg-type]


def prompt(seed: int, blocks: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(300, 8000) for _ in range(blocks * 32)]


def gateway(
    member: str, max_queued: int = 100, max_share_ratio: float | None = None
) -> tuple[CacheAwareSelector, RoutedFeed]:
    selector = CacheAwareSelector(CacheAwareConfig(max_share_ratio=max_share_ratio))
    feed = RoutedFeed(member, max_queued)
    feed.attach("local", selector)
    return selector, feed


def views() -> list[ReplicaView]:
    return [ReplicaView(name, True, 0) for name in REPLICAS]


def test_a_prefix_routed_by_one_gateway_is_found_by_the_other() -> None:
    one, one_feed = gateway("one")
    two, two_feed = gateway("two")
    placed = {}
    for repo in range(9):  # nine repositories' contexts spread over the replicas by gateway one
        placed[repo] = one.select_replica("local", views(), features(prompt(repo, 20)))
    batch = one_feed.take_batch()
    assert batch is not None and one_feed.take_batch() is None
    assert two_feed.receive(batch) == 9
    assert one_feed.receive(batch) == 0  # its own batch, back from the channel
    for repo in range(9):  # a follow-up through gateway two goes where the prefix is
        follow_up = prompt(repo, 20) + prompt(100 + repo, 2)
        assert two.select_replica("local", views(), features(follow_up)) == placed[repo]
        assert two.last is not None and two.last.reason == "prefix"
    assert len(set(placed.values())) == 3


def test_a_sessions_home_travels_with_its_decision() -> None:
    one, one_feed = gateway("one")
    two, two_feed = gateway("two")
    first = one.select_replica("local", views(), features([], episode="s1"))  # no tokens yet
    batch = one_feed.take_batch()
    assert batch is not None
    two_feed.receive(batch)
    busier = [ReplicaView(name, True, 1 if name == first else 0) for name in REPLICAS]
    assert two.select_replica("local", busier, features([], episode="s1")) == first
    assert two.last is not None and two.last.reason == "home"


def test_the_share_guard_counts_the_requests_other_gateways_routed() -> None:
    one, one_feed = gateway("one")
    two, two_feed = gateway("two", max_share_ratio=1.2)
    hot = prompt(7, 20)
    # Gateway one (no guard of its own) keeps a hot prefix on one replica.
    chosen = {
        one.select_replica("local", views(), features(hot + prompt(100 + i, 1))) for i in range(30)
    }
    assert len(chosen) == 1
    placed = chosen.pop()
    batch = one_feed.take_batch()
    assert batch is not None and two_feed.receive(batch) == 30
    # Gateway two has routed nothing itself, yet its guard sees that replica over its share.
    assert two.select_replica("local", views(), features(hot + prompt(999, 1))) != placed
    assert two.last is not None and two.last.guarded == "share"


def test_the_queue_keeps_the_newest_decisions_and_counts_the_dropped() -> None:
    one, feed = gateway("one", max_queued=3)
    for repo in range(5):
        one.select_replica("local", views(), features(prompt(repo, 2)))
    assert feed.stats()["routed_dropped"] == 2
    _, two_feed = gateway("two")
    batch = feed.take_batch()
    assert batch is not None and two_feed.receive(batch) == 3
    assert two_feed.receive(b"not json") == 0 and two_feed.undecodable == 1
