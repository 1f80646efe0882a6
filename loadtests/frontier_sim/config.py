"""Knobs of the frontier simulator, each defined and documented once.

The same model feeds the CLI (flags are generated from the fields), the programmatic runners and
the per-request overrides: a request may carry ``x-sim-<field-name-with-dashes>`` headers for the
fields in :data:`PER_REQUEST_KNOBS` (e.g. ``x-sim-ttft-ms: 250``), plus the shorthand
``x-sim-error: <status>`` which fails that one request with the given HTTP status.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError

DEFAULT_MODELS: tuple[str, ...] = (
    "gpt-4o-mini",
    "gpt-4o",
    "claude-3-5-sonnet-latest",
    "claude-3-5-haiku-latest",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "sim-local",
)

HEADER_PREFIX = "x-sim-"
FORCE_ERROR_HEADER = "x-sim-error"


class SimulatorConfig(BaseModel):
    """Behaviour of a simulated frontier provider (OpenAI and Anthropic wire formats)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Latency
    ttft_ms: float = Field(
        default=0.0, ge=0, description="Delay before the first byte of every answer, in ms."
    )
    tokens_per_s: float = Field(
        default=0.0,
        ge=0,
        description="Writing pace in tokens (stream chunks) per second: a stream's events are "
        "spaced by it, a non-streamed answer comes when all its tokens are written; 0 means "
        "unpaced.",
    )
    slow_model_ttft_ms: float = Field(
        default=2000.0,
        ge=0,
        description="Extra delay for model names containing 'slow', in ms.",
    )

    # Answers
    answer_tokens: int = Field(
        default=16, ge=1, description="Words in a default answer (one word is one token)."
    )
    seed: int = Field(
        default=0, description="Seeds answer words (with the request's seed) and the error RNG."
    )
    models: tuple[str, ...] = Field(
        default=DEFAULT_MODELS, min_length=1, description="Model names listed by GET /v1/models."
    )
    reject_unknown_models: bool = Field(
        default=False,
        description="Answer 404 for models not in `models` (by default any name is served).",
    )

    # Body limits as the providers document them: a larger body gets 413 in the endpoint's
    # error shape. Anthropic: 32 MB on Messages (docs.anthropic.com/en/api/overview, "Request
    # size limits"); OpenAI: 50 MB of payload per request (its images guide).
    anthropic_max_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=1024,
        description="Largest /v1/messages body accepted (Anthropic's 32 MB); larger gets 413.",
    )
    openai_max_body_bytes: int = Field(
        default=50 * 1024 * 1024,
        ge=1024,
        description="Largest body accepted on the OpenAI endpoints (OpenAI's 50 MB per request); "
        "larger gets 413.",
    )

    prompt_cache_size: int = Field(
        default=10_000,
        ge=0,
        description="Prompt prefixes the simulated providers keep cached, least recently used "
        "forgotten first (OpenAI: one per 128 tokens of a prompt; Anthropic: one per "
        "cache_control marker; see prompt_cache.py); 0 turns prompt caching off.",
    )

    # Oracle for IDE task prompts (see oracle.py)
    oracle: bool = Field(
        default=True,
        description="Answer IDE task prompts registered through POST /sim/oracle (by prompt "
        "hash) with the task's reference answer.",
    )
    oracle_capacity: int = Field(
        default=65536,
        ge=1,
        description="Registered task prompts kept; the oldest registrations are forgotten first.",
    )
    oracle_accuracy: float = Field(
        default=0.97,
        ge=0,
        le=1,
        description="Probability that the oracle gives the task's reference answer (else a "
        "plausible wrong one).",
    )

    max_tool_rounds: int = Field(
        default=8,
        ge=1,
        description="Tool calls the model makes in one user turn at most; then it answers in "
        "text (a provider's model does not call tools without end).",
    )

    # The scripted agent for agent tasks (see agent_policy.py)
    agent_success_rate: float = Field(
        default=0.9,
        ge=0,
        le=1,
        description="Probability that the scripted agent solves a registered agent task (else it "
        "makes one realistic mistake: a wrong fix, a missed file, a wrong line); drawn once per "
        "task, seeded.",
    )
    agent_invalid_call_rate: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Probability that one tool call of the scripted agent breaks its tool's "
        "schema (a required argument left out); the agent then repeats the call correctly.",
    )

    # What the provider received, for tests of what left the gateway
    keep_request_bodies: int = Field(
        default=0,
        ge=0,
        description="Request bodies kept as received, the newest this many, listed by GET "
        "/sim/requests (DELETE forgets them); 0 keeps none.",
    )

    # Failures
    error_rate: float = Field(
        default=0.0, ge=0, le=1, description="Probability of failing a request (seeded RNG)."
    )
    error_status: int = Field(
        default=500, ge=400, le=599, description="HTTP status of failures drawn by error_rate."
    )
    ratelimit_retry_after_s: int = Field(
        default=1,
        ge=0,
        description="Retry-After of the 429 answered to model names containing 'ratelimit'.",
    )
    cut_stream_after_chunks: int | None = Field(
        default=None,
        ge=0,
        description="Close streamed answers abruptly after this many SSE events (no [DONE]).",
    )

    # Prices, reported by GET /sim/prices and the x-sim-cost-usd response header
    input_usd_per_mtok: float = Field(
        default=2.5, ge=0, description="Price of a million prompt tokens, in USD."
    )
    output_usd_per_mtok: float = Field(
        default=10.0, ge=0, description="Price of a million completion tokens, in USD."
    )

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        """Price of one answer under this configuration: every prompt token at the input
        price (the simulator reports prompt caching in its usage but does not discount it)."""
        return (
            prompt_tokens * self.input_usd_per_mtok + completion_tokens * self.output_usd_per_mtok
        ) / 1_000_000


PER_REQUEST_KNOBS: frozenset[str] = frozenset(
    {
        "ttft_ms",
        "tokens_per_s",
        "answer_tokens",
        "error_rate",
        "error_status",
        "cut_stream_after_chunks",
        "input_usd_per_mtok",
        "output_usd_per_mtok",
        "oracle_accuracy",
        "openai_max_body_bytes",
        "anthropic_max_body_bytes",
    }
)


class KnobHeaderError(ValueError):
    """An ``x-sim-*`` header names no knob or carries an invalid value."""


def apply_header_overrides(config: SimulatorConfig, headers: Mapping[str, str]) -> SimulatorConfig:
    """Return ``config`` with the request's ``x-sim-*`` headers applied (``config`` if none).

    ``headers`` must have lower-case keys or be case-insensitive (aiohttp's are).
    Raises :class:`KnobHeaderError` for an unknown knob or an invalid value.
    """
    overrides: dict[str, object] = {}
    for raw_name, value in headers.items():
        name = raw_name.lower()
        if not name.startswith(HEADER_PREFIX):
            continue
        if name == FORCE_ERROR_HEADER:
            overrides["error_rate"] = 1.0
            overrides["error_status"] = value
            continue
        field = name[len(HEADER_PREFIX) :].replace("-", "_")
        if field not in PER_REQUEST_KNOBS:
            raise KnobHeaderError(f"unknown simulator header {raw_name!r}")
        overrides[field] = None if value.lower() in ("", "none") else value
    if not overrides:
        return config
    try:
        return SimulatorConfig.model_validate({**config.model_dump(), **overrides})
    except ValidationError as exc:
        raise KnobHeaderError(f"invalid simulator header: {exc.errors()[0]['msg']}") from exc
