"""One fleet of gateways: every process of every host shares one truth.

What is shared, and through what (``fleet.backend: redis``; ``local``: this process alone):

- routing: the config's ``backends``/``routing``/``shadow`` sections and the learned state, as one
  versioned document; a reload (admin API, SIGHUP, ``rl_loop.refit_cli``) on any gateway reaches
  every gateway, which swaps to it whole (:mod:`gateway.routing.reload`);
- the canary (set, promote, drop) and each replica's drain flag and weights version; a drain
  waits for the requests in flight on the replica across the fleet;
- cache-aware replica choice: every decision goes to the other gateways, which index it as
  their own (:mod:`gateway.fleet.routed_feed`), so a session finds its replica and its prefix
  through any gateway;
- budgets: reserved before a call and settled after it in Redis (:mod:`gateway.auth.
  shared_budget`); rate limits: ``auth.rate_limit_backend: redis`` (:mod:`gateway.auth.ratelimit`).

The record of truth stays the traffic store (PostgreSQL for a fleet): records, keys and spend.
Redis holds the fast shared state; while it is unreachable every gateway serves on its last known
state, says so (``switchyard_fleet_state_stale`` and a log line) and catches up when it returns.

This package is the transport only: :mod:`~gateway.fleet.config` (the section),
:mod:`~gateway.fleet.snapshot` (the values), :mod:`~gateway.fleet.base` (the interface, the
local fleet), :mod:`~gateway.fleet.redis_fleet`, :mod:`~gateway.fleet.routed_feed` (cache-aware
decisions), :mod:`~gateway.fleet.episode_memory` (agent episodes' memory). What applies the
fleet's state is the routing's reload authority (:mod:`gateway.routing.reload`); joining at
start-up is :func:`gateway.startup.join_fleet`; operators reach it through ``GET /admin/fleet``
(:mod:`gateway.admin.fleet`) and ``switchyard fleet`` (:mod:`gateway.admin.fleet_cli`). The
``--workers`` supervisor is :mod:`gateway.workers`. Operators' guide: docs/fleet.md.
"""
