"""The one reload authority: every change of what requests are routed by goes through here.

A change is published to the fleet (:mod:`gateway.fleet`: this process alone, or every gateway
sharing a Redis) as a :class:`~gateway.fleet.snapshot.FleetChange`; each member applies the
fleet's snapshot with :meth:`Reloader.apply`, in two phases: *prepare* (validate the routing
document, decode the learned state, load the tokenizers a new target needs: the awaits) and
*commit* (build the back-ends, swap the decider's routing and canary, set the replica controls:
no await in between). Snapshots are applied in revision order (an older or equal revision of
the same epoch is skipped); a document that does not validate here is logged and skipped, and
this process keeps serving what it served.

Operations (the admin API, the console, SIGHUP):

- :meth:`Reloader.reload`: re-read this process's config file and learned state, publish their
  routing document (or the live release promoted over it: :mod:`gateway.routing.release`;
  :meth:`Reloader.restore` does the same at start-up);
- :meth:`Reloader.start_canary` / :meth:`restage` (next stage, pause, resume) / :meth:`promote` /
  :meth:`drop_canary`;
- :meth:`Reloader.drain`: publish the replica as drained; every member stops routing to it and
  reports, under the drain's id, its requests still in flight there once they are done (or at
  the timeout). Returns when every live member reported none left (a member that leaves the
  fleet is no longer waited for), or at the timeout with the sum still in flight;
- :meth:`Reloader.undrain`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gateway.config import ConfigFileError, SwitchyardConfig, load_config
from gateway.errors import InvalidRequestError, NotFoundError
from gateway.fleet.base import KEPT_DRAINS, Fleet
from gateway.fleet.snapshot import (
    CLEAR,
    ROUTING_SECTIONS,
    CanaryDoc,
    FleetChange,
    FleetSnapshot,
    ReplicaControl,
    RoutingDoc,
    replica_key,
    split_replica_key,
)
from gateway.routing.decider import Decider
from gateway.routing.release import LiveRelease
from gateway.routing.table import (
    Canary,
    Routing,
    RoutingView,
    build_policy,
    load_learned_state,
)
from gateway.routing.targets import Targets
from router.config import RoutingConfig
from router.learned import LearnedState

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.02
Spawn = Callable[[Coroutine[Any, Any, None]], None]


def routing_doc(config: SwitchyardConfig, learned: LearnedState | None) -> RoutingDoc:
    """What a config publishes to the fleet (see :mod:`gateway.fleet.snapshot`)."""
    sections = config.model_dump(mode="json", include=set(ROUTING_SECTIONS))
    return RoutingDoc(sections, learned.to_json() if learned is not None else None)


def _learned(data: dict[str, Any] | None) -> LearnedState | None:
    return LearnedState.from_json(data) if data is not None else None


def routing_for(
    targets: Targets, config: SwitchyardConfig, learned: LearnedState | None
) -> Routing:
    """The routing ``config`` describes: its policy over the back-ends ``targets`` build."""
    return Routing(build_policy(config, config.routing, learned), targets.build(config), config)


class Reloader:
    """Changes what this process routes by, with the fleet (module docstring)."""

    def __init__(
        self,
        decider: Decider,
        targets: Targets,
        fleet: Fleet,
        config_path: Path | None,
        spawn: Spawn,
    ) -> None:
        self.decider = decider
        self.targets = targets
        self.fleet = fleet
        self.config_path = config_path
        self.local = decider.routing.config  # this process's own sections (listen, store, ...)
        self.applied = FleetSnapshot()
        self.apply_failures = 0
        self._spawn = spawn
        self._lock = asyncio.Lock()
        self._reported: dict[str, None] = {}  # drain ids this member reports on (the newest)
        self.release: LiveRelease | None = None  # the store's live release (a store is set)

    def seed(self) -> FleetSnapshot:
        """This process's state as a first snapshot (the fleet's if it has none yet)."""
        doc = routing_doc(self.decider.routing.config, self.decider.learned_state)
        self.applied = FleetSnapshot(revision=0, routing=doc, routing_version=0)
        return self.applied

    async def apply(self, snapshot: FleetSnapshot) -> None:
        """Serve ``snapshot`` here (module docstring)."""
        async with self._lock:
            current = self.applied
            if snapshot.epoch == current.epoch and snapshot.revision <= current.revision:
                return
            try:
                commit = await self._prepare(snapshot)
            except (ConfigFileError, ValueError, KeyError, TypeError) as exc:
                self.apply_failures += 1
                log.error(
                    "fleet revision %d not applied, serving revision %d still: %s",
                    snapshot.revision,
                    current.revision,
                    exc,
                )
                self.applied = snapshot_without_routing(snapshot, current)
                self._apply_replicas(self.applied)
                return
            commit()
            self.applied = snapshot
            self._apply_replicas(snapshot)

    async def _prepare(self, snapshot: FleetSnapshot) -> Callable[[], None]:
        """The awaits (validation, tokenizers); returns the commit, which has none."""
        decider, current = self.decider, self.applied
        config: SwitchyardConfig | None = None
        learned = decider.learned_state
        tokenizers = self.targets.tokenizers
        doc = snapshot.routing
        new_version = (
            snapshot.routing_version != current.routing_version or snapshot.epoch != current.epoch
        )
        adopting_own = current.revision == 0 and doc == current.routing  # joined with our seed
        if doc is not None and new_version and not adopting_own:
            data = self.local.model_dump(mode="json", exclude=set(ROUTING_SECTIONS))
            try:
                config = SwitchyardConfig.model_validate({**data, **doc.sections})
            except ValidationError as exc:
                raise ConfigFileError(f"fleet routing document: {exc}") from exc
            # Decoding a fitted state and planning its thresholds take milliseconds to tens of
            # them on a large calibration pool: in a worker thread, not on the serving loop.
            learned = await asyncio.to_thread(_learned, doc.learned)
            if learned is None and config.routing.learned is not None:
                learned = LearnedState("unfitted")
            if learned is not None and config.routing.learned is not None:
                await asyncio.to_thread(learned.plans, config.routing.learned)
            tokenizers = self.targets.load_tokenizers(config)
            for tokenizer in tokenizers.values():  # a target it adds hashes from the start
                await tokenizer.await_load()
        canary = decider.canary
        canary_changed = (
            snapshot.canary_version != current.canary_version or snapshot.epoch != current.epoch
        )
        if canary_changed:
            base = config or decider.routing.config
            canary = await asyncio.to_thread(self._canary, snapshot.canary, base, learned)

        def commit() -> None:
            routing = decider.routing
            if config is not None:
                self.targets.tokenizers = tokenizers
                routing = routing_for(self.targets, config, learned)
                self.targets.warn_unpriced(config)
            decider.swap(RoutingView(routing, canary), learned)

        return commit

    def _canary(
        self, doc: CanaryDoc | None, config: SwitchyardConfig, learned: LearnedState | None
    ) -> Canary | None:
        if doc is None:
            return None
        routing = RoutingConfig.model_validate(doc.routing)
        own = _learned(doc.learned) if doc.learned is not None else learned
        policy = build_policy(config, routing, own)
        return Canary(policy, doc.share, routing, doc.weights, doc.schedule, doc.paused, doc.shadow)

    def rebuild(self) -> None:
        """The back-ends built again for the routing served now (the fleet joined: local
        targets now share their decisions), and the controls put back on the new pools."""
        decider = self.decider
        routing = routing_for(self.targets, decider.routing.config, decider.learned_state)
        decider.swap(RoutingView(routing, decider.canary), decider.learned_state)
        self._apply_replicas(self.applied)

    def _apply_replicas(self, snapshot: FleetSnapshot) -> None:
        """Controls onto the pools (after every apply: a rebuilt target starts afresh)."""
        pools = self.targets.pools()
        for key, control in snapshot.replicas.items():
            target, url = split_replica_key(key)
            pool = pools.get(target)
            if pool is None or url not in pool.replicas:
                continue
            pool.apply_control(url, control.drained, control.weights_version)
            drain_id = control.drain_id
            if control.drained and drain_id and drain_id not in self._reported:
                self._reported[drain_id] = None
                while len(self._reported) > KEPT_DRAINS:
                    del self._reported[next(iter(self._reported))]
                timeout = control.drain_timeout_s
                self._spawn(self._report_drain(target, url, drain_id, timeout))

    async def _report_drain(self, target: str, url: str, drain_id: str, timeout_s: float) -> None:
        pool = self.targets.pools().get(target)
        left = await pool.drain(url, timeout_s) if pool is not None else 0
        try:
            await self.fleet.ack_drain(drain_id, left)
        except Exception as exc:  # the drain's caller sees the missing report as in flight
            log.warning("fleet: could not report drain %s: %s", drain_id, exc)

    # Operations.

    async def reload(self) -> Routing:
        """Re-read the config file and learned state here; every member serves them, or the
        live release promoted over that file (:mod:`gateway.routing.release`). Raises on an
        invalid file; the running routing is kept then."""
        config = self.decider.routing.config  # no file: the routing served, its state re-read
        if self.config_path is not None:
            config = await asyncio.to_thread(load_config, self.config_path)
            self.local = config
        elif self.release is not None:
            config = self.local  # the routing started with stands for the file
        await self._publish(await self._released(config))
        return self.decider.routing

    async def restore(self) -> None:
        """At start-up: serve the live release instead of the file's routing, if one was
        promoted over it (:mod:`gateway.routing.release`)."""
        config = await self._released(self.local)
        if config is not self.local:
            await self._publish(config)

    async def _publish(self, config: SwitchyardConfig) -> None:
        """Every member serves ``config``'s routing with its learned state, read now."""
        learned = await asyncio.to_thread(load_learned_state, config)
        await self.fleet.publish(FleetChange(routing=routing_doc(config, learned)))

    def file_routing(self) -> dict[str, Any]:
        """The routing document of the config file as loaded (what a promotion is over)."""
        return self.local.routing.model_dump(mode="json")

    async def _released(self, config: SwitchyardConfig) -> SwitchyardConfig:
        """``config`` with the live release's routing in place of its own, when one was promoted
        over it; ``config`` itself otherwise."""
        if self.release is None:
            return config
        promoted = await self.release.over(config.routing.model_dump(mode="json"))
        if promoted is None:
            return config
        try:
            return SwitchyardConfig.model_validate(
                {**config.model_dump(mode="json"), "routing": promoted}
            )
        except ValidationError as exc:  # e.g. a target the file no longer defines
            log.error("live release does not fit the config file; serving the file's: %s", exc)
            return config

    async def start_canary(
        self,
        routing: RoutingConfig,
        share: float,
        own_learned: LearnedState | None,
        *,
        weights: str | None = None,
        schedule: tuple[float, ...] = (),
        shadow: float = 0.0,
    ) -> Canary:
        """Every member lets ``routing`` decide ``share`` of its requests (``own_learned``: the
        candidate's own fitted state, when it names another state file; ``weights`` and
        ``schedule``: a release's candidate weights and later stages; ``shadow``: a shadow
        stage first, paused, the candidate's weights answering that share off the path)."""
        learned = own_learned.to_json() if own_learned is not None else None
        doc = CanaryDoc(
            routing.model_dump(mode="json"),
            share,
            learned,
            weights,
            schedule,
            paused=shadow > 0,
            shadow=shadow,
        )
        await self.fleet.publish(FleetChange(canary=doc))
        canary = self.decider.canary
        if canary is None:
            raise InvalidRequestError("invalid canary: the fleet could not apply it (see logs)")
        return canary

    async def restage(
        self,
        share: float,
        schedule: tuple[float, ...],
        paused: bool,
        own_learned: LearnedState | None = None,
    ) -> Canary:
        """The running canary at another stage (share, stages left) or paused / resumed, on
        every member; its routing and weights unchanged, its learned state too unless
        ``own_learned`` replaces it (a resume after the shadow stage, with the scorer refitted
        on the candidate's shadow answers); any stage change ends the shadow stage (404: no
        canary)."""
        doc = self.applied.canary
        if doc is None or self.decider.canary is None:
            raise NotFoundError("no canary running")
        learned = own_learned.to_json() if own_learned is not None else doc.learned
        changed = dataclasses.replace(
            doc, share=share, schedule=schedule, paused=paused, learned=learned, shadow=0.0
        )
        await self.fleet.publish(FleetChange(canary=changed))
        canary = self.decider.canary
        if canary is None:
            raise InvalidRequestError("the fleet could not apply the canary's stage (see logs)")
        return canary

    async def promote(self, routing: RoutingConfig, learned: LearnedState | None) -> None:
        """Every member routes by ``routing`` (with ``learned``) and drops its canary, in one
        change."""
        sections = {**self.applied_sections(), "routing": routing.model_dump(mode="json")}
        doc = RoutingDoc(sections, learned.to_json() if learned is not None else None)
        await self.fleet.publish(FleetChange(routing=doc, canary=CLEAR))

    async def drop_canary(self) -> None:
        await self.fleet.publish(FleetChange(canary=CLEAR))

    def applied_sections(self) -> dict[str, Any]:
        doc = self.applied.routing or routing_doc(self.decider.routing.config, None)
        return dict(doc.sections)

    async def drain(self, target: str, url: str, timeout_s: float) -> int:
        """Take ``url`` out of rotation on every member; the requests still in flight there
        across the fleet after ``timeout_s`` (0: drained)."""
        key = replica_key(target, url)
        previous = self.applied.replicas.get(key, ReplicaControl())
        drain_id = f"{self.fleet.member_id}:{time.time_ns()}"
        control = ReplicaControl(True, previous.weights_version, drain_id, timeout_s)
        await self.fleet.publish(FleetChange(replicas={key: control}))
        return await wait_drained(self.fleet, drain_id, timeout_s)

    async def undrain(self, target: str, url: str, weights_version: str | None) -> ReplicaControl:
        key = replica_key(target, url)
        previous = self.applied.replicas.get(key, ReplicaControl())
        version = weights_version if weights_version is not None else previous.weights_version
        control = ReplicaControl(False, version)
        await self.fleet.publish(FleetChange(replicas={key: control}))
        return control


def snapshot_without_routing(snapshot: FleetSnapshot, current: FleetSnapshot) -> FleetSnapshot:
    """``snapshot`` with the routing and canary this process still serves (it could not apply
    the new ones); its replica controls apply."""
    return FleetSnapshot(
        revision=snapshot.revision,
        epoch=snapshot.epoch,
        routing=current.routing,
        routing_version=current.routing_version,
        canary=current.canary,
        canary_version=current.canary_version,
        replicas=snapshot.replicas,
    )


async def wait_drained(fleet: Fleet, drain_id: str, timeout_s: float) -> int:
    """Wait until every live member reported no request in flight on ``drain_id``; the sum
    still in flight (members not yet reporting count 1) at ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        members = await fleet.live_members()
        acks = await fleet.drain_acks(drain_id)
        left = sum(acks.get(m, 1) for m in members)
        if left == 0 or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(DRAIN_POLL_S)
