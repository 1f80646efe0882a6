"""Replica selector config: which policy picks a vLLM replica, and its knobs. Strict (unknown keys
are errors); every default is defined here and nowhere else.

YAML, under a vLLM back-end (``replica_selector:``)::

    kind: cache_aware          # round_robin | least_load | session_affinity | cache_aware
    mode: approximate          # or precise: score on vLLM's KV cache events
    block_size: 32             # vLLM's --block-size (checked against /metrics at startup)
    hash_algo: sha256_cbor     # vLLM's --prefix-caching-hash-algo

What each knob means for the algorithm is explained at the top of ``router/cache_aware.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from router.block_hash import (
    DEFAULT_HASH_ALGO,
    DEFAULT_MEMO_BLOCKS,
    DEFAULT_NONE_HASH_SEED,
    HashAlgo,
)


class LoadSignalConfig(BaseModel):
    """How replica load is observed: the gateway's own in-flight counts (always fresh) and
    vLLM's ``/metrics`` (running, waiting, KV usage; shared by every client of the replica)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scrape_interval_s: float = Field(
        default=1.0, gt=0, description="How often each replica's /metrics is read."
    )
    stale_after_s: float = Field(
        default=5.0, gt=0, description="Scraped values older than this are ignored."
    )


class RoundRobinConfig(BaseModel):
    """Cycle through healthy replicas (the v1 baseline)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["round_robin"] = "round_robin"


class LeastLoadConfig(BaseModel):
    """The replica with the fewest running + waiting requests (ties: round-robin)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["least_load"] = "least_load"
    load: LoadSignalConfig = Field(default_factory=LoadSignalConfig)


class SessionAffinityConfig(BaseModel):
    """A consistent-hash ring of replicas: a session key always lands on the same replica while
    it is healthy; removing one replica moves only its own sessions."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["session_affinity"] = "session_affinity"
    virtual_nodes: int = Field(
        default=160, ge=1, le=4096, description="Ring points per replica (evens out shares)."
    )
    key: Literal["episode", "api_key"] = Field(
        default="episode",
        description="episode: the session id (falls back to the API key); api_key: the client.",
    )


class CacheAwareConfig(BaseModel):
    """Prefix-cache match plus load, with imbalance guards (see ``router/cache_aware.py``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["cache_aware"] = "cache_aware"
    mode: Literal["approximate", "precise"] = Field(
        default="approximate",
        description="approximate: index what we routed, evict like an LRU of the replica's "
        "KV capacity; precise: index what vLLM reports in its KV cache events.",
    )
    block_size: int = Field(default=32, ge=1, description="vLLM's --block-size, in tokens.")
    hash_algo: HashAlgo = Field(
        default=DEFAULT_HASH_ALGO, description="vLLM's --prefix-caching-hash-algo."
    )
    none_hash_seed: str = Field(
        default=DEFAULT_NONE_HASH_SEED,
        description="vLLM's PYTHONHASHSEED if it is set for the replicas, else the default.",
    )
    # Index size.
    capacity_fraction: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="Share of a replica's KV blocks the approximate index assumes hold "
        "reusable prefixes (the rest holds running requests' fresh blocks).",
    )
    default_capacity_blocks: int = Field(
        default=16_384, ge=1, description="Capacity assumed until /metrics reports num blocks."
    )
    max_index_blocks: int = Field(
        default=65_536,
        ge=1,
        description="Hard bound on blocks indexed per replica (~150-340 B each, ~420 at worst: "
        "10-28 MB).",
    )
    memo_blocks: int = Field(
        default=DEFAULT_MEMO_BLOCKS,
        ge=2,
        description="Blocks the hash memo holds, and bound on the blocks of the sessions' last "
        "prompts it remembers (~200 B per block of this bound, both together).",
    )
    # Scoring.
    load_cost_tokens: float = Field(
        default=128.0,
        ge=0,
        description="Prompt tokens of prefill one queued or running request is worth: a "
        "replica with one more request must save this many more tokens to win.",
    )
    home_bonus_tokens: float = Field(
        default=256.0,
        ge=0,
        description="Prompt tokens the request's home replica (rendezvous hash of its session, "
        "else of a block early in its prompt) is credited with: a session keeps its replica "
        "when the index has forgotten it, unless that replica is this much busier.",
    )
    # Guards.
    balance_abs_threshold: int = Field(
        default=16, ge=0, description="Loads within this many requests never count as imbalanced."
    )
    balance_rel_threshold: float = Field(
        default=1.5, ge=1, description="... nor loads within this factor of the least loaded."
    )
    kv_usage_limit: float = Field(
        default=0.98, gt=0, le=1, description="A replica with more KV usage than this is skipped."
    )
    max_share_ratio: float | None = Field(
        default=1.2,
        ge=1,
        description="A replica that received more than this times the mean share of recent "
        "requests is skipped (None: no share guard).",
    )
    share_noise_sd: float = Field(
        default=1.5,
        ge=0,
        description="... and more than the mean plus this many standard deviations of a fair "
        "random split of the window (so that a short window's counting noise rarely trips it).",
    )
    share_window_per_replica: int = Field(
        default=128, ge=1, description="Recent requests per replica the share guard looks at."
    )
    pending_ttl_s: float = Field(
        default=10.0,
        ge=0,
        description="precise: a routed prefix counts as cached for this long before vLLM's "
        "event confirms it (covers the prefill in progress).",
    )
    load: LoadSignalConfig = Field(default_factory=LoadSignalConfig)
    kv_event_endpoints: dict[str, str] = Field(
        default_factory=dict,
        description="precise: replica base URL -> ZMQ endpoint of its KV event publisher "
        "(vLLM --kv-events-config endpoint, e.g. tcp://10.0.0.5:5557).",
    )
    kv_event_topic: str = Field(
        default="", description="precise: the publishers' topic (--kv-events-config topic)."
    )
    kv_event_replay_endpoints: dict[str, str] = Field(
        default_factory=dict,
        description="precise: replica base URL -> ZMQ endpoint of its publisher's replay socket "
        "(vLLM --kv-events-config replay_endpoint, e.g. tcp://10.0.0.5:5558); a gap in the "
        "event sequence is filled from it instead of resetting that replica's index.",
    )
    kv_event_replay_timeout_s: float = Field(
        default=1.0,
        gt=0,
        description="precise: a replay that stays silent this long is given up (what arrived "
        "is kept).",
    )

    @model_validator(mode="after")
    def _check(self) -> CacheAwareConfig:
        if self.mode == "precise" and not self.kv_event_endpoints:
            raise ValueError(
                "mode `precise` needs `kv_event_endpoints: {replica_url: tcp://host:port}`; "
                "start vLLM with --kv-events-config, or use mode `approximate`"
            )
        unknown = set(self.kv_event_replay_endpoints) - set(self.kv_event_endpoints)
        if unknown:
            raise ValueError(
                f"kv_event_replay_endpoints name replicas {sorted(unknown)} that have no "
                "kv_event_endpoints entry: add their event endpoints too"
            )
        return self


SelectorConfig = Annotated[
    RoundRobinConfig | LeastLoadConfig | SessionAffinityConfig | CacheAwareConfig,
    Field(discriminator="kind"),
]
