"""Budgets across a fleet: spend reserved before a call and settled after it, atomically, in Redis.

Per API key with a budget, two Redis hashes (``N`` = the fleet's name):

    N:budget:{<key id>}        spent (USD settled, fleet-wide), n (calls settled), mean (USD per
                               call, a running mean: the first ten calls' average, then an
                               exponential one weighting each new call 1/10), out_n, out_mean
                               (the same of what calls cost beyond their counted input)
    N:budget:{<key id>}:held   reservation id -> "<USD> <expiry unix s>": calls in flight

Reserve (one script, before the call; :meth:`SharedBudget.reserve`): drop expired reservations,
sum the rest (``held``); refuse (403 ``budget_exceeded``) when ``spent + held >= budget``; else
hold, under a new id, the call's input cost (its counted prompt tokens times the target's input
price) plus ``out_mean``, or the key's ``mean`` when the input is not counted. Settle (one
script, when the exchange finished, whatever its end; :meth:`SharedBudget.settle`): drop the id,
add the call's real cost to ``spent`` and to the means.

The bound: a call is admitted only while settled spend plus what calls in flight are expected to
cost is under the budget, so N gateways together overshoot by at most what the calls in flight
at the crossing cost beyond their reservations (before a key has a mean, its reservations are
0: at most the calls in flight then).

The durable record stays the traffic store's ``api_key.spent_usd`` (:mod:`gateway.auth.budget`
flushes every process's spend there); Redis ``spent`` never goes below what this process knows
(each reserve raises it to at least ``floor``), so a Redis that lost its data, or missed a
settle while unreachable, catches up from the store. A process that dies leaves its
reservations to expire (``reservation_ttl_s``). Redis unreachable: :meth:`reserve` answers None
and the caller falls back to this process's own view (the guard's local check).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from gateway.auth.spend import PrincipalView, format_usd
from gateway.errors import PermissionDeniedError
from gateway.redis_scripts import ScriptRunner

if TYPE_CHECKING:
    # Annotations only: this module is on the gateway's start-up path (gateway.routing.join),
    # where importing redis is slow (docs/hot_path.md); redis is imported when a Redis client is
    # built.
    import redis.asyncio as aioredis

KEY_TTL_S: Final = 7 * 24 * 3600  # idle keys' hashes expire; the store re-seeds them

# KEYS: spend, held. ARGV: now, budget, id, ttl_s, floor, input USD ('' = not counted).
# Returns {ok, spent, held}.
_RESERVE_LUA: Final = """
local now = tonumber(ARGV[1])
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent') or '0')
local floor = tonumber(ARGV[5])
if floor > spent then
  spent = floor
  redis.call('HSET', KEYS[1], 'spent', ARGV[5])
end
local held = 0
local all = redis.call('HGETALL', KEYS[2])
for i = 1, #all, 2 do
  local amount, expiry = string.match(all[i + 1], '(%S+) (%S+)')
  if tonumber(expiry) < now then
    redis.call('HDEL', KEYS[2], all[i])
  else
    held = held + tonumber(amount)
  end
end
if spent + held >= tonumber(ARGV[2]) then
  return {0, tostring(spent), tostring(held)}
end
local estimate
if ARGV[6] ~= '' then
  estimate = tonumber(ARGV[6]) + tonumber(redis.call('HGET', KEYS[1], 'out_mean') or '0')
else
  estimate = tonumber(redis.call('HGET', KEYS[1], 'mean') or '0')
end
local ttl = tonumber(ARGV[4])
redis.call('HSET', KEYS[2], ARGV[3], string.format('%.17g %.3f', estimate, now + ttl))
redis.call('EXPIRE', KEYS[2], math.ceil(ttl))
redis.call('EXPIRE', KEYS[1], KEY_TTL)
return {1, tostring(spent), tostring(held + estimate)}
""".replace("KEY_TTL", str(KEY_TTL_S))

# KEYS: spend, held. ARGV: id ('' = none), cost, the reservation's input USD ('' = not
# counted). Returns spent.
_SETTLE_LUA: Final = """
local function add_mean(count_field, mean_field, value)
  local n = redis.call('HINCRBY', KEYS[1], count_field, 1)
  local mean = tonumber(redis.call('HGET', KEYS[1], mean_field) or '0')
  local w = math.max(1.0 / n, 0.1)
  redis.call('HSET', KEYS[1], mean_field, string.format('%.17g', mean + (value - mean) * w))
end
if ARGV[1] ~= '' then redis.call('HDEL', KEYS[2], ARGV[1]) end
local cost = tonumber(ARGV[2])
if cost > 0 then
  local spent = redis.call('HINCRBYFLOAT', KEYS[1], 'spent', ARGV[2])
  add_mean('n', 'mean', cost)
  if ARGV[3] ~= '' then add_mean('out_n', 'out_mean', math.max(cost - tonumber(ARGV[3]), 0)) end
  redis.call('EXPIRE', KEYS[1], KEY_TTL)
  return spent
end
return redis.call('HGET', KEYS[1], 'spent') or '0'
""".replace("KEY_TTL", str(KEY_TTL_S))


@dataclass(frozen=True, slots=True)
class Reservation:
    """A call's hold on its key's budget, released by :meth:`SharedBudget.settle`;
    ``input_usd``: the counted input cost it holds (None: it holds the key's mean)."""

    id: str
    input_usd: float | None = None


class SharedBudget:
    """Reservations and settled spend per key in Redis (see the module docstring)."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        namespace: str,
        member_id: str,
        reservation_ttl_s: float,
        retry_s: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._ns = namespace
        self._member = member_id
        self._ttl = reservation_ttl_s
        self._clock = clock
        self._scripts = ScriptRunner(client, "budgets (local view only)", retry_s=retry_s)
        self._reserve = self._scripts.register(_RESERVE_LUA)
        self._settle = self._scripts.register(_SETTLE_LUA)
        self._ids = itertools.count()
        self.refused = 0

    def _keys(self, key_id: str) -> list[str]:
        spend = f"{self._ns}:budget:{{{key_id}}}"
        return [spend, spend + ":held"]

    async def reserve(
        self, principal: PrincipalView, floor_usd: float, input_usd: float | None = None
    ) -> Reservation | None:
        """Hold the call's expected cost (``input_usd``: its counted input's cost, None: not
        counted); 403 ``budget_exceeded`` when settled plus held spend has reached the budget.
        None: no budget, or Redis unreachable (the caller's local check stands)."""
        budget, key_id = principal.budget_usd, principal.key_id
        if budget is None or key_id is None:
            return None
        rid = f"{self._member}:{next(self._ids)}"
        if input_usd is not None and not (math.isfinite(input_usd) and input_usd >= 0):
            input_usd = None
        counted = "" if input_usd is None else repr(input_usd)
        args = (repr(self._clock()), repr(budget), rid, repr(self._ttl), repr(floor_usd), counted)
        result = await self._scripts.call(self._reserve, self._keys(key_id), args)
        if result is None:
            return None
        ok, spent, held = int(result[0]), float(result[1]), float(result[2])
        if not ok:
            self.refused += 1
            in_flight = f", {format_usd(held)} held by calls in flight" if held > 0 else ""
            raise PermissionDeniedError(
                f"API key '{principal.name}' has used its budget of {format_usd(budget)} "
                f"(spent {format_usd(spent)}{in_flight}).",
                code="budget_exceeded",
            )
        return Reservation(rid, input_usd)

    async def settle(self, key_id: str, reservation: Reservation | None, usd: float) -> None:
        """Release ``reservation`` and add the call's cost (``usd`` >= 0)."""
        rid, counted = "", ""
        if reservation is not None:
            rid = reservation.id
            counted = "" if reservation.input_usd is None else repr(reservation.input_usd)
        await self._scripts.call(self._settle, self._keys(key_id), (rid, repr(usd), counted))

    async def spent(self, key_id: str) -> float:
        """The fleet's settled spend of ``key_id`` (0 when unknown or unreachable)."""
        try:
            raw = await self._scripts.client.hget(self._keys(key_id)[0], "spent")
        except self._scripts.redis_error:
            return 0.0
        return float(raw) if raw is not None else 0.0

    def stats(self) -> dict[str, float]:
        return {
            "shared_refused": float(self.refused),
            "shared_failures": float(self._scripts.failures),
            "shared_down": float(self._scripts.down),
        }

    async def close(self) -> None:
        await self._scripts.close()
