"""Cache-aware decisions shared across a fleet: this gateway's go out, the others' come in.

Each local target's :class:`~router.cache_aware.CacheAwareSelector` hands every decision to
:meth:`RoutedFeed.attach`'s callback (a :class:`~router.replicas.RoutedPrompt`: replica, prompt
block keys, home key). They wait in a bounded queue (the oldest dropped beyond
``fleet.routed_queue``, counted) until the fleet sends them as one batch every
``fleet.routed_flush_s``; a batch from another member is applied to the same target's selector
with :meth:`~router.cache_aware.CacheAwareSelector.apply_routed`, as if this gateway had routed
it. So the approximate prefix index, the session homes and the share counts are the fleet's, not
one process's, and stay bounded as before (the same index, the same limits).

Wire: one JSON object per batch, ``{"m": member, "e": [[target, replica, home, [keys...]]]}``
(a 64-bit key is at most 20 digits: about 2 KB for a prompt of 100 blocks).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import orjson

from router.cache_aware import CacheAwareSelector
from router.replicas import RoutedPrompt
from router.selectors import ObservingSelector

log = logging.getLogger(__name__)

_Entry = tuple[str, str, int | None, tuple[int, ...]]


class RoutedFeed:
    def __init__(self, member_id: str, max_queued: int) -> None:
        self.member_id = member_id
        self._queue: deque[_Entry] = deque(maxlen=max_queued)
        self._selectors: dict[str, CacheAwareSelector] = {}
        self.sent = 0
        self.received = 0
        self.dropped = 0
        self.undecodable = 0

    def attach(self, target: str, selector: ObservingSelector) -> None:
        """Share ``selector``'s decisions (cache-aware selectors only: the others keep no
        index, and session affinity is the same on every gateway by construction)."""
        if not isinstance(selector, CacheAwareSelector):
            self._selectors.pop(target, None)
            return
        self._selectors[target] = selector

        def routed(decision: RoutedPrompt) -> None:
            if len(self._queue) == self._queue.maxlen:
                self.dropped += 1
            self._queue.append((target, decision.replica, decision.home, decision.keys))

        selector.on_routed = routed

    def take_batch(self) -> bytes | None:
        """The queued decisions as one message (None: nothing queued)."""
        if not self._queue:
            return None
        entries = [[t, r, h, k] for t, r, h, k in self._queue]
        self._queue.clear()
        self.sent += len(entries)
        return orjson.dumps({"m": self.member_id, "e": entries})

    def receive(self, payload: bytes) -> int:
        """Apply another member's batch; returns the decisions applied."""
        try:
            batch: dict[str, Any] = orjson.loads(payload)
            if batch["m"] == self.member_id:
                return 0
            entries = batch["e"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            self.undecodable += 1
            return 0
        applied = 0
        for target, replica, home, keys in entries:
            selector = self._selectors.get(target)
            if selector is None:
                continue
            selector.apply_routed(RoutedPrompt(replica, tuple(keys), home))
            applied += 1
        self.received += applied
        return applied

    def stats(self) -> dict[str, float]:
        return {
            "routed_sent": float(self.sent),
            "routed_received": float(self.received),
            "routed_dropped": float(self.dropped),
        }
