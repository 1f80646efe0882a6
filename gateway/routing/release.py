"""The promoted routing, kept in the traffic store, so that a promotion outlives the process.

A promotion (the console's or ``POST /admin/canary/promote``) writes its routing as the live
release: a ``policy_version`` row with status ``live`` whose config holds the routing document
and ``promoted_over``, a hash of the routing the config *file* held when it was promoted. On
start-up and on every reload (SIGHUP, ``POST /admin/reload``) the reloader asks
:meth:`LiveRelease.over` which routing to serve:

- the newest live release, when the file's routing is still the one it was promoted over (the
  operator has not touched the file since): the promotion survives;
- the file's routing, when it changed after the promotion (an operator's edit is a newer
  decision than the promotion it replaces); that release is then retired, so that reverting the
  file later does not bring it back.

The fleet shares the store, so every gateway restarts into the same release. Without a store
(``store.enabled: false``) there is nowhere to keep it, and a promotion lasts until the next
restart or reload, as the console says.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson

from traffic.store import PolicyVersionRecord, StoreBackend, StoreError

log = logging.getLogger(__name__)

LIVE: Final = "live"
RETIRED: Final = "retired"


def routing_hash(routing: dict[str, Any]) -> str:
    """A stable hash of a routing document (keys sorted)."""
    return hashlib.sha256(orjson.dumps(routing, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def release_config(routing: dict[str, Any], file_routing: dict[str, Any]) -> dict[str, Any]:
    """The ``policy_version`` config of a promotion of ``routing`` over the file's."""
    return {"routing": routing, "promoted_over": routing_hash(file_routing)}


@dataclass(frozen=True, slots=True)
class Promoted:
    version: str
    routing: dict[str, Any]
    promoted_over: str
    row: PolicyVersionRecord  # as stored


class LiveRelease:
    """Reads and retires the live release in the store (module docstring)."""

    def __init__(self, backend: StoreBackend) -> None:
        self._backend = backend

    async def live(self) -> list[Promoted]:
        """The live promotions, newest first ([]: none, or the store cannot be read)."""
        try:
            rows = await self._backend.list_policy_versions()  # oldest first
        except StoreError as exc:
            log.warning("live release: store unreadable, serving the config file's: %s", exc)
            return []
        found = []
        for row in reversed(rows):
            routing, over = row.config.get("routing"), row.config.get("promoted_over")
            if row.status == LIVE and isinstance(routing, dict) and isinstance(over, str):
                found.append(Promoted(row.id, routing, over, row))
        return found

    async def over(self, file_routing: dict[str, Any]) -> dict[str, Any] | None:
        """The routing to serve instead of ``file_routing`` (None: the file's). When the file
        changed after the newest promotion, every live promotion is older than that edit: all
        are retired."""
        live = await self.live()
        if not live:
            return None
        newest = live[0]
        if newest.promoted_over == routing_hash(file_routing):
            log.info("live release: serving promoted routing %s", newest.version)
            return newest.routing
        log.warning(
            "live release: the config file's routing changed after %s was promoted; the file's"
            " routing replaces it",
            newest.version,
        )
        for promoted in live:
            try:
                await self._backend.upsert_policy_version(replace(promoted.row, status=RETIRED))
            except StoreError as exc:
                log.warning("live release: could not retire %s: %s", promoted.version, exc)
        return None
