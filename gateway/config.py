"""Gateway config: one YAML file, strict (unknown keys are errors), every default defined here.

Top level: ``gateway`` (listening, limits, timeouts), ``backends`` (targets the router may
choose), ``routing`` (:class:`router.config.RoutingConfig`), ``store``, ``telemetry``,
``console`` (the ops console under ``/ui``).
Cross references (routing -> backends) are checked when the file is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.auth.config import AuthConfig
from gateway.fleet.config import FleetConfig
from router.config import RoutingConfig
from router.selector_config import CacheAwareConfig, RoundRobinConfig, SelectorConfig
from serving.names import ADMIN_TOKEN_ENV
from traffic.store.config import StoreConfig


class ListenConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)


# Providers' own body limits, which the doors' defaults must not undercut (a body the provider
# behind a door accepts is never refused by the gateway first):
# Anthropic: 32 MB on Messages and Token Counting (docs.anthropic.com/en/api/overview, "Request
# size limits"); OpenAI: up to 50 MB of payload per request (platform.openai.com/docs/guides/
# images-vision, "Image input requirements").
MESSAGES_BODY_BYTES = 32 * 1024 * 1024
OPENAI_BODY_BYTES = 64 * 1024 * 1024


class BodyLimits(BaseModel):
    """The largest request body each door reads (413 above it). A single number in the YAML
    (``max_body_bytes: 8388608``) sets every door."""

    model_config = ConfigDict(extra="forbid")

    chat: int = Field(
        default=OPENAI_BODY_BYTES, gt=0, description="/v1/chat/completions and /v1/completions."
    )
    responses: int = Field(default=OPENAI_BODY_BYTES, gt=0, description="/v1/responses.")
    messages: int = Field(
        default=MESSAGES_BODY_BYTES,
        gt=0,
        description="/v1/messages and /v1/messages/count_tokens.",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_for_all(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"chat": value, "responses": value, "messages": value}
        return value

    def for_endpoint(self, endpoint: str) -> int:
        """The limit of the door serving ``endpoint`` (a :data:`router.features.Endpoint`)."""
        if endpoint == "messages":
            return self.messages
        if endpoint == "responses":
            return self.responses
        return self.chat


class LimitsConfig(BaseModel):
    """Bounds on what one request may be and cost; a request over a bound gets a 400 (413 for
    the body size) in its door's shape, naming the parameter, before any upstream work.

    The input bounds are checked by :mod:`gateway.wire.bounds` on every door (chat, completions,
    responses, messages, count_tokens, feedback, admin). Real clients stay far inside them:
    Claude Code's 24 tool schemas nest about 8 levels deep and a long agent session carries a
    few hundred messages.
    """

    model_config = ConfigDict(extra="forbid")

    max_body_bytes: BodyLimits = Field(
        default_factory=BodyLimits, description="413 above this, per door (see BodyLimits)."
    )
    request_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Whole request, all tries: until the answer or a stream's first byte "
        "(a stream's body is bounded by its back-end's `timeout_s`).",
    )
    drain_timeout_s: float = Field(default=30.0, ge=0, description="Grace period on SIGTERM.")
    max_json_depth: int = Field(
        default=64,
        ge=8,
        le=200,  # the record's JSON encoder stops at 255 levels; stay well under it
        description="Nesting depth of the whole JSON body (an object or array is one level).",
    )
    max_messages: int = Field(
        default=10_000, ge=1, description="Messages (chat, messages) or input items (responses)."
    )
    max_content_parts: int = Field(default=1_000, ge=1, description="Content parts per message.")
    max_tools: int = Field(default=512, ge=0, description="Tools per request.")
    max_tool_schema_depth: int = Field(
        default=32, ge=2, description="Nesting depth of one tool definition, its schema included."
    )
    max_string_chars: int = Field(  # 32 Mi: a base64 image at OpenAI's 20 MB is 26.7 M
        default=32 * 1024 * 1024, ge=1024, description="Characters of any one string in the body."
    )
    offload_body_bytes: int = Field(
        default=64 * 1024,
        ge=0,
        description="Bodies over this size are parsed and checked, and their frontier calls "
        "prepared, on worker threads instead of the event loop (0: always).",
    )


class BreakerConfig(BaseModel):
    """Circuit breaker per back-end: open after N consecutive failures, probe after cooldown."""

    model_config = ConfigDict(extra="forbid")

    failure_threshold: int = Field(default=5, ge=1)
    cooldown_s: float = Field(default=10.0, gt=0)


class RetryConfig(BaseModel):
    """Retry budget: failovers may add at most ``budget_ratio`` extra load (plus a floor)."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=3, ge=1, description="Targets tried per request, at most.")
    budget_ratio: float = Field(default=0.2, ge=0)
    min_retries_per_s: float = Field(default=5.0, ge=0)


class ReplicaHealthConfig(BaseModel):
    """How the gateway probes a vLLM target's replicas (``GET /health``). A refused connection or
    an error status takes a replica out of rotation at once; a probe that times out counts
    against it only ``slow_probes_down`` times in a row, since a replica busy loading weights or
    prefilling long prompts on saturated cores answers late and still serves."""

    model_config = ConfigDict(extra="forbid")

    interval_s: float = Field(default=0.5, gt=0, description="Between two probes of a replica.")
    timeout_s: float = Field(default=2.0, gt=0, description="One probe's whole answer.")
    slow_probes_down: int = Field(
        default=3, ge=1, description="Timed-out probes in a row that take a replica out."
    )


class BackendConfig(BaseModel):
    """A target. ``kind: vllm`` = our replicas over HTTP; ``kind: litellm`` = a frontier API."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["vllm", "litellm"]
    model: str = Field(
        description="vllm: the served model name; litellm: `provider/model`, e.g. "
        "`openai/gpt-4o-mini` or `anthropic/claude-haiku-4-5`."
    )
    replicas: list[str] = Field(default_factory=list, description="vllm: replica base URLs.")
    api_base: str | None = Field(default=None, description="litellm: provider base URL.")
    api_key_env: str | None = Field(default=None, description="litellm: env var with the key.")
    # Prices (USD per million tokens). Setting input or output prices this back-end from these
    # fields alone; otherwise litellm's price map prices `kind: litellm` back-ends and the cost
    # of a `kind: vllm` one is unknown. See gateway/backends/pricing.py.
    input_usd_per_mtok: float | None = Field(
        default=None, ge=0, description="Uncached input tokens (unset: 0 when a price is set)."
    )
    output_usd_per_mtok: float | None = Field(
        default=None, ge=0, description="Completion tokens (unset: 0 when a price is set)."
    )
    cached_input_usd_per_mtok: float | None = Field(
        default=None,
        ge=0,
        description="Cache reads. Unset: the provider's rule (Anthropic bills them at a tenth "
        "of the input price; other providers: the input price).",
    )
    cache_write_usd_per_mtok: float | None = Field(
        default=None,
        ge=0,
        description="Cache writes. Unset: the provider's rule (Anthropic bills 5-minute cache "
        "writes at 1.25x the input price; OpenAI has no write charge: the input price).",
    )
    # As the OpenAI and Anthropic SDKs wait (600 s): an agent's long answer, extended thinking
    # included, streams for minutes.
    timeout_s: float = Field(default=600.0, gt=0, description="Per attempt, until the last byte.")
    connect_timeout_s: float = Field(default=5.0, gt=0)
    first_byte_timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="Streams: the longest silence from the upstream, its first byte included "
        "(a reasoning model may think that long before it writes); lower it for a faster "
        "failover from a provider that hangs. A non-streamed answer is bounded by timeout_s.",
    )
    extra_headers: dict[str, str] = Field(
        default_factory=dict, description="Headers sent with every call to this back-end."
    )
    weights_version: str | None = Field(
        default=None,
        description="vllm: weights version served at start (weight swaps update it per replica).",
    )
    replica_selector: SelectorConfig = Field(
        default_factory=RoundRobinConfig,
        description="vllm: how a replica is chosen (round_robin, least_load, session_affinity, "
        "cache_aware; see router/cache_aware.py).",
    )
    responses_api: bool | None = Field(
        default=None,
        description="litellm: whether the provider serves OpenAI's Responses API, so the "
        "Responses door passes its client's body through. Unset: yes for `openai/...` (a server "
        "there without it is found out at the first call and translated to), no for the other "
        "providers (translated to chat completions).",
    )
    translation: Literal["transforms", "acompletion"] = Field(
        default="transforms",
        description="litellm, Anthropic targets: how a chat body is translated. `transforms`: "
        "litellm's own transformation classes and the gateway's direct call (about 0.6 ms of "
        "CPU a call); `acompletion`: litellm's whole call path (about 5 ms), the fallback.",
    )
    health: ReplicaHealthConfig = Field(
        default_factory=ReplicaHealthConfig, description="vllm: how replicas are probed."
    )
    tokenizer_dir: str | None = Field(
        default=None,
        description="vllm: the served model's directory (tokenizer + chat template), needed by "
        "cache_aware to hash prompts into blocks exactly as vLLM does.",
    )
    max_input_tokens: int | None = Field(
        default=None,
        gt=0,
        description="The target's context window in prompt tokens: a longer prompt is never sent "
        "to it. Unset: litellm's model map (`max_input_tokens`) for litellm targets; none (not "
        "checked) for vllm ones.",
    )
    secrets: Literal["allow", "redact", "block"] = Field(
        default="allow",
        description="Secrets found in a request for this target (docs/secrets.md): allow (sent "
        "as they are), redact (placeholders sent, originals put back in the answer), block (400).",
    )

    @model_validator(mode="after")
    def _check_kind_fields(self) -> BackendConfig:
        if self.kind == "vllm" and not self.replicas:
            raise ValueError("a `vllm` backend needs `replicas: [http://host:port, ...]`")
        if self.kind == "litellm" and self.replicas:
            raise ValueError("`replicas` is only for `vllm` backends; use `api_base` for litellm")
        sel = self.replica_selector
        if self.kind != "vllm" and not isinstance(sel, RoundRobinConfig):
            raise ValueError("`replica_selector` applies to `vllm` backends only")
        if self.kind == "vllm" and self.responses_api is not None:
            raise ValueError("`responses_api` applies to `litellm` backends only")
        if self.kind != "vllm" and self.health != ReplicaHealthConfig():
            raise ValueError("`health` applies to `vllm` backends only")
        if isinstance(sel, CacheAwareConfig):
            if self.tokenizer_dir is None:
                raise ValueError("cache_aware replica choice needs `tokenizer_dir`")
            urls = {u.rstrip("/") for u in self.replicas}
            unknown = {u.rstrip("/") for u in sel.kv_event_endpoints} - urls
            if unknown:
                raise ValueError(f"kv_event_endpoints name unknown replicas {sorted(unknown)}")
        if self.kind == "litellm" and "/" not in self.model:
            raise ValueError(f"litellm model `{self.model}` needs a provider prefix, e.g. openai/")
        return self


class TelemetryConfig(BaseModel):
    """Traces (gateway/tracing; docs/telemetry.md). Off by default: no per-request work."""

    model_config = ConfigDict(extra="forbid")

    traces: Literal["off", "console", "otlp"] = Field(
        default="off",
        description="otlp: OTLP/HTTP protobuf to otlp_endpoint; console: spans on stdout.",
    )
    otlp_endpoint: str = Field(  # give vLLM the same (serving.launch --otlp-endpoint)
        default="http://127.0.0.1:4318", description="OTLP/HTTP base URL (<it>/v1/traces)."
    )
    service_name: str = "switchyard-gateway"
    sample_ratio: float = Field(  # the others cost a few us, and tell vLLM not to record
        default=1.0,
        ge=0,
        le=1,
        description="Share of new traces recorded (a client's sampled flag decides for its own).",
    )


class StoreSection(StoreConfig):
    """The traffic store (``traffic.store.config``) plus whether the gateway records at all."""

    enabled: bool = True
    writer_process: bool = Field(
        default=True,
        description="The record writer runs in a process of its own (one per gateway process, "
        "gateway.recording.process), off the serving loop; false (or an in-memory SQLite "
        "database) keeps it in the gateway's process.",
    )


class TokenCountConfig(BaseModel):
    """Prompt tokens counted before the call (gateway/backends/prompt_count.py), for `tpm`
    admission, fleet budget reservations and context windows."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=True,
        description="false: no count; tpm checked after calls only, fleet budgets reserve the "
        "key's mean cost, context windows left to the providers.",
    )
    cache_chars: int = Field(
        default=16 * 1024 * 1024,
        ge=0,
        description="Characters of long prompt texts kept with their counts (system prompts, "
        "tools, an agent's history), so a next turn encodes only what is new (0: no cache).",
    )
    preload: bool = Field(
        default=False,
        description="Load tiktoken's encodings at start. false: at the first prompt that needs "
        "a count (a key with a tpm limit or a budget, a prompt whose size bound exceeds a "
        "window), counted by characters until loaded; o200k_base alone holds ~77 MB, which "
        "short prompts of keys without limits never need.",
    )


class GatewaySection(BaseModel):
    model_config = ConfigDict(extra="forbid")

    listen: ListenConfig = Field(default_factory=ListenConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    token_count: TokenCountConfig = Field(default_factory=TokenCountConfig)
    admin_token_env: str = Field(
        default=ADMIN_TOKEN_ENV, description="Env var holding the admin credential."
    )
    memory_trim_interval_s: float | None = Field(
        default=10.0,
        gt=0,
        description="Seconds between returns of the C heap's free memory to the system "
        "(gateway.memory_trim); null: never.",
    )


class ShadowConfig(BaseModel):
    """Shadow evaluation: the local model also answers a share of frontier-served requests, off
    the user's path; the answer is recorded (``shadow`` table) to learn when local is enough."""

    model_config = ConfigDict(extra="forbid")

    share: float = Field(default=0.0, ge=0, le=1, description="Of frontier-served requests.")
    target: str | None = Field(default=None, description="The local target that answers.")
    max_in_flight: int = Field(
        default=4, ge=1, description="Shadow calls at once; beyond, a sampled request is skipped."
    )


class ReleaseMonitorConfig(BaseModel):
    """``release``: the automatic decision on a running canary (router/sequential.py,
    gateway/routing/release_monitor.py)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="Roll a worse canary back automatically.")
    auto_promote: bool = Field(
        default=False, description="Also promote a canary the test finds not worse."
    )
    margin: float = Field(
        default=0.1, gt=0, lt=1, description="Accept-rate loss (candidate - live) tolerated."
    )
    alpha: float = Field(default=0.05, gt=0, lt=1, description="The test's error rate.")
    max_verdicts: int = Field(
        default=4000, ge=10, description="Differing verdicts before no evidence means rollback."
    )
    max_pending: int = Field(
        default=100_000, ge=1, description="Requests awaiting a verdict, kept in memory."
    )
    local_floor: float | None = Field(
        default=0.85,
        gt=0,
        le=1,
        description="Roll back once the candidate's local answers in any segment (plain, tools; "
        "exploration draws left out) are surely accepted less often than this: a candidate bad "
        "on a slice of traffic shows there long before the pooled difference does. None: off.",
    )


WindowName = Literal["1h", "6h", "24h", "7d", "30d"]  # the console's time windows


class ConsoleConfig(BaseModel):
    """The console under ``/ui``: who may use it, what it reads, how much at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="Serve the console under /ui.")
    session_ttl_s: float = Field(
        default=8 * 3600, gt=0, description="A login lasts this long (signed session cookie)."
    )
    window: WindowName = Field(default="24h", description="Time window the pages open with.")
    class_tag: str = Field(
        default="family", min_length=1, description="The tag whose value is a request's class."
    )
    page_size: int = Field(default=50, ge=5, le=500, description="Exchanges per traffic page.")
    replay_sample: int = Field(
        default=2000,
        ge=50,
        le=50_000,
        description="Newest successful exchanges of the window a routing change is replayed on.",
    )
    rollup_interval_s: float = Field(
        default=60.0,
        gt=0,
        description="How often the closed hours of traffic are rolled up for long windows.",
    )
    gateway_url: str | None = Field(
        default=None,
        description="This gateway's base URL for a weight swap's admin calls (drain, undrain); "
        "default: the URL the console was reached at.",
    )
    flywheel_dir: Path = Field(
        default=Path(".cache/flywheel"),
        description="Where flywheel runs write their rounds and reports (run-*/round-N/...).",
    )


class SwitchyardConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gateway: GatewaySection = Field(default_factory=GatewaySection)
    backends: dict[str, BackendConfig]
    routing: RoutingConfig
    store: StoreSection = Field(default_factory=StoreSection)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    shadow: ShadowConfig = Field(default_factory=ShadowConfig)
    release: ReleaseMonitorConfig = Field(default_factory=ReleaseMonitorConfig)
    auth: AuthConfig = Field(default_factory=AuthConfig)
    console: ConsoleConfig = Field(default_factory=ConsoleConfig)
    fleet: FleetConfig = Field(
        default_factory=FleetConfig,
        description="The gateway processes that share state (gateway/fleet/config.py).",
    )

    @model_validator(mode="after")
    def _routing_refers_to_backends(self) -> SwitchyardConfig:
        if self.auth.required and not self.store.enabled:
            raise ValueError(
                "auth.required needs the traffic store (API keys live there): "
                "enable `store` or set `auth: {required: false}`"
            )
        if self.shadow.share > 0:
            target = self.shadow.target
            if target is None or target not in self.backends:
                raise ValueError("shadow.share > 0 needs shadow.target naming a backend")
            if self.backends[target].kind != "vllm":
                raise ValueError(f"shadow.target `{target}` must be a local (vllm) backend")
        unknown = self.routing.referenced_targets() - set(self.backends)
        if unknown:
            raise ValueError(
                f"routing refers to undefined backends {sorted(unknown)}; "
                f"defined: {sorted(self.backends)}"
            )
        return self


class ConfigFileError(Exception):
    """The config file is missing, not YAML, or invalid; the message says where."""


def _expand_env(value: Any) -> Any:
    if isinstance(value, str):
        return os.path.expandvars(value)
    if isinstance(value, list):
        return [_expand_env(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand_env(v) for k, v in value.items()}
    return value


def parse_config(data: Any, source: str = "<config>") -> SwitchyardConfig:
    try:
        return SwitchyardConfig.model_validate(_expand_env(data))
    except ValidationError as exc:
        raise ConfigFileError(f"{source}: invalid config:\n{exc}") from exc


def load_config(path: str | Path) -> SwitchyardConfig:
    """Read and validate a YAML config; ``${VAR}`` in strings expands from the environment."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigFileError(f"{p}: cannot read: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigFileError(f"{p}: not valid YAML: {exc}") from exc
    return parse_config(data, str(p))
