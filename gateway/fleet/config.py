"""Configuration of the gateway fleet (the ``fleet`` section); every default defined once here.

``backend: local`` (default): this process is the whole fleet; nothing is shared and no Redis is
needed (one gateway process, as before). ``backend: redis``: every gateway process using the same
``redis_url`` and ``name`` is one fleet; routing, learned state, canary, replica drain and weights
versions, the cache-aware prefix index and budget reservations are shared through it (see
:mod:`gateway.fleet`).
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.auth.config import DEFAULT_REDIS_URL, check_redis_url

DEFAULT_FLEET_NAME: Final = "switchyard:fleet"
DEFAULT_POLL_INTERVAL_S: Final = 0.25
DEFAULT_HEARTBEAT_S: Final = 0.5
DEFAULT_MEMBER_TTL_S: Final = 3.0
DEFAULT_FLEET_TIMEOUT_S: Final = 0.5
DEFAULT_RETRY_S: Final = 0.5
DEFAULT_APPLY_WAIT_S: Final = 2.0
DEFAULT_ROUTED_FLUSH_S: Final = 0.01
DEFAULT_ROUTED_QUEUE: Final = 10_000

FleetBackendName = Literal["local", "redis"]

_NAME_RE = re.compile(r"^[A-Za-z0-9_:.-]{1,64}$")


class FleetConfig(BaseModel):
    """Which gateway processes share state, and how quickly they learn of a change."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: FleetBackendName = Field(
        default="local",
        description="local: this process alone (no Redis); redis: every gateway process on "
        "the same redis_url and name shares routing, canary, replica drains, the prefix index "
        "and budget reservations.",
    )
    redis_url: str = Field(
        default=DEFAULT_REDIS_URL,
        description="redis://[:password@]host:port/db (or rediss://, unix://). Never logged.",
    )
    name: str = Field(
        default=DEFAULT_FLEET_NAME,
        description="Prefix of every Redis key and channel of this fleet (two fleets may share "
        "one Redis under two names).",
    )
    poll_interval_s: float = Field(
        default=DEFAULT_POLL_INTERVAL_S,
        gt=0,
        le=1.0,
        description="Changes arrive by pub/sub at once; the fleet's revision is also read this "
        "often, so a lost notification delays a change by at most this long.",
    )
    heartbeat_s: float = Field(
        default=DEFAULT_HEARTBEAT_S, gt=0, description="How often a gateway says it is alive."
    )
    member_ttl_s: float = Field(
        default=DEFAULT_MEMBER_TTL_S,
        gt=0,
        description="A gateway unheard for this long has left the fleet (a drain stops waiting "
        "for it).",
    )
    timeout_s: float = Field(
        default=DEFAULT_FLEET_TIMEOUT_S,
        gt=0,
        description="Connect and command timeout; beyond it Redis counts as unreachable and the "
        "gateway serves on its last known state (switchyard_fleet_state_stale 1).",
    )
    retry_s: float = Field(
        default=DEFAULT_RETRY_S, gt=0, description="Pause between reconnection attempts."
    )
    apply_wait_s: float = Field(
        default=DEFAULT_APPLY_WAIT_S,
        ge=0,
        description="A change (reload, canary, drain, undrain) is answered once every live "
        "gateway serves it, or after this long (logged).",
    )
    routed_flush_s: float = Field(
        default=DEFAULT_ROUTED_FLUSH_S,
        gt=0,
        description="Cache-aware routing decisions are sent to the other gateways in batches "
        "at least this often.",
    )
    routed_queue: int = Field(
        default=DEFAULT_ROUTED_QUEUE,
        ge=1,
        description="Decisions held while Redis does not take them; beyond, the oldest are "
        "dropped (the other gateways' prefix index misses them, nothing else).",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, url: str) -> str:
        return check_redis_url(url, "fleet.redis_url")

    @field_validator("name")
    @classmethod
    def _name_chars(cls, name: str) -> str:
        if not _NAME_RE.match(name):
            raise ValueError(f"fleet.name must be 1-64 of A-Z a-z 0-9 _ : . -, got {name!r}")
        return name

    @model_validator(mode="after")
    def _ttl_covers_heartbeats(self) -> FleetConfig:
        if self.member_ttl_s < 2 * self.heartbeat_s:
            raise ValueError("fleet.member_ttl_s must be at least twice fleet.heartbeat_s")
        return self

    @property
    def shared(self) -> bool:
        return self.backend == "redis"
