"""What one benchmark run measures; every default is defined here once.

A *cell* is one (system, mode, concurrency): the load generator keeps ``concurrency`` requests in
flight against one system for ``duration_s`` (after ``warmup_requests`` uncounted requests) and
reports requests/s, latency percentiles and the server's CPU time per request.

Modes: ``unary`` (non-streamed, ``max_tokens`` tokens), ``stream`` (streamed, ``max_tokens``)
and ``stream_long`` (streamed, ``long_stream_tokens``): the two stream lengths give the cost of
one more streamed chunk. The simulator answers as many tokens as asked, unpaced (one write).

Systems, each a server and the wire format its load speaks, all answered by one frontier
simulator:

- ``direct``, ``direct_anthropic``: the simulator itself, OpenAI chat and Anthropic Messages
  (the floor every other system of that format is compared with);
- ``switchyard``, ``switchyard_rec``: the gateway's local path (a ``vllm`` backend pointed at
  the simulator), recording off and on (SQLite traffic store);
- ``frontier_openai``, ``frontier_openai_rec``: the gateway's frontier path (a ``litellm``
  backend, ``openai/<model>`` at ``<sim>/v1``) through ``/v1/chat/completions``, off and on;
- ``frontier_anthropic``, ``frontier_anthropic_rec``: the frontier path to an Anthropic-format
  upstream (``anthropic/<model>`` at ``<sim>``) through the gateway's Anthropic door
  ``/v1/messages``, off and on;
- translated by litellm's own classes, off and on (``_rec``): ``translated_anthropic`` (chat
  door -> Anthropic upstream), ``translated_openai`` (Messages door -> OpenAI upstream),
  ``responses_anthropic`` (Responses door ``/v1/responses`` -> Anthropic upstream);
- ``frontier_openai_secrets_rec``: ``frontier_openai_rec`` (its twin) with ``secrets: redact``
  on its targets (docs/secrets.md) and a token in the prompt (:data:`SECRET_PROMPT`);
- ``litellm``: the LiteLLM proxy (one worker, master key, no database, retries off), OpenAI
  format only (the like-for-like comparison for ``frontier_openai``).

Gateway servers: ``switchyard`` and ``switchyard_rec`` (local backend only), ``frontier``,
``frontier_rec`` and ``frontier_secrets_rec`` (both frontier backends); each is started alone,
so its time to ready is not shared with another start-up, ``ready_samples`` times (the median
is its time to ready; the last start serves the load).

``BENCH_QUICK=1`` (or ``--quick``) keeps every system and mode but fewer cells (the long stream
at the headline concurrency only) and shorter windows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

from loadtests.bench.gateway.loadgen import PROMPT

Mode = Literal["unary", "stream", "stream_long"]
Wire = Literal["openai", "anthropic", "responses"]
SystemName = Literal[
    "direct",
    "direct_anthropic",
    "switchyard",
    "switchyard_rec",
    "frontier_openai",
    "frontier_openai_rec",
    "frontier_anthropic",
    "frontier_anthropic_rec",
    "translated_anthropic",
    "translated_anthropic_rec",
    "translated_openai",
    "translated_openai_rec",
    "responses_anthropic",
    "responses_anthropic_rec",
    "frontier_openai_secrets_rec",
    "litellm",
]
ServerName = Literal[
    "simulator",
    "switchyard",
    "switchyard_rec",
    "frontier",
    "frontier_rec",
    "frontier_secrets_rec",
    "litellm",
]
Family = Literal["direct", "local", "frontier", "proxy"]

MODES: Final[tuple[Mode, ...]] = ("unary", "stream", "stream_long")
MODEL_NAME: Final = "sim-local"  # the local path's served model
FRONTIER_OPENAI_MODEL: Final = "gpt-4o-mini"  # names litellm's price map knows, as in production
FRONTIER_ANTHROPIC_MODEL: Final = "claude-haiku-4-5"
CHAT_PATH: Final = "/v1/chat/completions"
MESSAGES_PATH: Final = "/v1/messages"
RESPONSES_PATH: Final = "/v1/responses"
GATEWAY_SERVERS: Final[tuple[ServerName, ...]] = (
    "switchyard",
    "switchyard_rec",
    "frontier",
    "frontier_rec",
    "frontier_secrets_rec",
)
# A random, fake token: what a `secrets: redact` target's request carries (the same for all).
SECRET_PROMPT: Final = PROMPT + " My token: ghp_Zq8LmN3pR5tV7xB9dF2hJ4kS6wY1cE0aG3iK"


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """What a system is: which server the load goes to, in which wire format, for which model."""

    label: str
    server: ServerName
    wire: Wire
    model: str
    family: Family  # for the chart and the per-path figures
    baseline: SystemName  # the simulator direct in the same format (``added_p50_ms``)
    recording_of: SystemName | None = None  # the recording-off twin of a recording-on system
    prompt: str = PROMPT  # what the load asks

    @property
    def url_path(self) -> str:
        return {"anthropic": MESSAGES_PATH, "responses": RESPONSES_PATH}.get(self.wire, CHAT_PATH)


SYSTEM_SPECS: Final = MappingProxyType(
    {
        "direct": SystemSpec(
            "simulator direct", "simulator", "openai", MODEL_NAME, "direct", "direct"
        ),
        "direct_anthropic": SystemSpec(
            "simulator direct (Anthropic)",
            "simulator",
            "anthropic",
            FRONTIER_ANTHROPIC_MODEL,
            "direct",
            "direct_anthropic",
        ),
        "switchyard": SystemSpec(
            "Switchyard local", "switchyard", "openai", MODEL_NAME, "local", "direct"
        ),
        "switchyard_rec": SystemSpec(
            "Switchyard local +rec",
            "switchyard_rec",
            "openai",
            MODEL_NAME,
            "local",
            "direct",
            recording_of="switchyard",
        ),
        "frontier_openai": SystemSpec(
            "Switchyard frontier OpenAI",
            "frontier",
            "openai",
            FRONTIER_OPENAI_MODEL,
            "frontier",
            "direct",
        ),
        "frontier_openai_rec": SystemSpec(
            "Switchyard frontier OpenAI +rec",
            "frontier_rec",
            "openai",
            FRONTIER_OPENAI_MODEL,
            "frontier",
            "direct",
            recording_of="frontier_openai",
        ),
        "frontier_anthropic": SystemSpec(
            "Switchyard frontier Anthropic",
            "frontier",
            "anthropic",
            FRONTIER_ANTHROPIC_MODEL,
            "frontier",
            "direct_anthropic",
        ),
        "frontier_anthropic_rec": SystemSpec(
            "Switchyard frontier Anthropic +rec",
            "frontier_rec",
            "anthropic",
            FRONTIER_ANTHROPIC_MODEL,
            "frontier",
            "direct_anthropic",
            recording_of="frontier_anthropic",
        ),
        "translated_anthropic": SystemSpec(
            "Switchyard chat -> Anthropic (litellm's classes)",
            "frontier",
            "openai",
            FRONTIER_ANTHROPIC_MODEL,
            "frontier",
            "direct_anthropic",
        ),
        "translated_anthropic_rec": SystemSpec(
            "Switchyard chat -> Anthropic (litellm's classes) +rec",
            "frontier_rec",
            "openai",
            FRONTIER_ANTHROPIC_MODEL,
            "frontier",
            "direct_anthropic",
            recording_of="translated_anthropic",
        ),
        "translated_openai": SystemSpec(
            "Switchyard Messages -> OpenAI (litellm's classes)",
            "frontier",
            "anthropic",
            FRONTIER_OPENAI_MODEL,
            "frontier",
            "direct",
        ),
        "translated_openai_rec": SystemSpec(
            "Switchyard Messages -> OpenAI (litellm's classes) +rec",
            "frontier_rec",
            "anthropic",
            FRONTIER_OPENAI_MODEL,
            "frontier",
            "direct",
            recording_of="translated_openai",
        ),
        "responses_anthropic": SystemSpec(
            "Switchyard Responses -> Anthropic",
            "frontier",
            "responses",
            FRONTIER_ANTHROPIC_MODEL,
            "frontier",
            "direct_anthropic",
        ),
        "responses_anthropic_rec": SystemSpec(
            "Switchyard Responses -> Anthropic +rec",
            "frontier_rec",
            "responses",
            FRONTIER_ANTHROPIC_MODEL,
            "frontier",
            "direct_anthropic",
            recording_of="responses_anthropic",
        ),
        "frontier_openai_secrets_rec": SystemSpec(
            "Switchyard frontier OpenAI +rec, secrets: redact",
            "frontier_secrets_rec",
            "openai",
            FRONTIER_OPENAI_MODEL,
            "frontier",
            "direct",
            prompt=SECRET_PROMPT,
        ),
        "litellm": SystemSpec(
            "LiteLLM proxy", "litellm", "openai", FRONTIER_OPENAI_MODEL, "proxy", "direct"
        ),
    }
)
SYSTEMS: Final[tuple[SystemName, ...]] = tuple(SYSTEM_SPECS)  # type: ignore[arg-type]
SYSTEM_LABELS: Final = MappingProxyType({name: s.label for name, s in SYSTEM_SPECS.items()})
# Headline figures are read at this concurrency: throughput, and CPU per request too (at c=1 a
# server's per-request CPU includes the idle loop's wake-ups between requests).
HEADLINE_MODE: Final[Mode] = "unary"
HEADLINE_CONCURRENCY: Final = 16
LITELLM_VERSION: Final = "1.106.2"


@dataclass(frozen=True, slots=True)
class BenchSettings:
    """One run's knobs (full mode by default; :func:`quick_settings` for the short run)."""

    concurrencies: tuple[int, ...] = (1, 16, 64)
    # The long stream's concurrencies; None: the same as `concurrencies`.
    long_stream_concurrencies: tuple[int, ...] | None = None
    modes: tuple[Mode, ...] = MODES
    systems: tuple[SystemName, ...] = SYSTEMS
    duration_s: float = 5.0  # measured window per cell
    warmup_requests: int = 50  # per cell, uncounted; at least 2 per connection
    # Extra back-to-back on/off pairs per recording path and mode at c=16, in alternating order;
    # the recording ratios are the median over the main cells' pair and these. Odd: as many
    # pairs in each order (see cells.measure_recording_rounds)
    recording_rounds: int = 5
    max_requests_per_cell: int = 200_000  # a bound, should a window be long
    max_tokens: int = 16  # answer length asked for (unary and stream)
    long_stream_tokens: int = 256  # answer length of the long stream
    # Added time to first byte at c=1, interleaved with the direct path (loadtests.bench.gateway.
    # ttft): the answer's length (the 30-token stream) and the rotation's rounds.
    ttft_tokens: int = 30
    ttft_rounds: int = 600
    ttft_warmup_rounds: int = 30
    store_records: int = 10_000  # records written per store backend
    store_backends: tuple[str, ...] = ("sqlite", "postgres")
    postgres_url: str = "postgresql://postgres@127.0.0.1:5432/test"
    out_dir: Path = Path(".cache/bench/gateway")
    litellm_venv: Path = Path(".cache/bench/litellm-proxy-venv")
    startup_timeout_s: float = 120.0
    ready_poll_s: float = 0.01  # how often /ready is asked while a server starts (time to ready)
    ready_samples: int = 3  # starts per gateway server; its time to ready is their median
    cell_timeout_margin_s: float = 60.0  # a cell's load generator is killed past its window + this
    profile_s: float = 0.0  # > 0: py-spy records the gateway this long under load
    profile_system: SystemName = "switchyard"  # which system's gateway --profile records
    profile_mode: Mode = "unary"  # under which load --profile records it
    quick: bool = False

    def __post_init__(self) -> None:
        if not self.concurrencies or min(self.concurrencies) < 1:
            raise ValueError("concurrencies must be a non-empty list of integers >= 1")
        if self.long_stream_concurrencies is not None and (
            not self.long_stream_concurrencies or min(self.long_stream_concurrencies) < 1
        ):
            raise ValueError("long_stream_concurrencies must be integers >= 1 (or None)")
        if self.duration_s <= 0:
            raise ValueError("duration_s must be > 0")
        if self.ready_samples < 1:
            raise ValueError("ready_samples must be >= 1")
        if not 1 <= self.max_tokens < self.long_stream_tokens:
            raise ValueError("need 1 <= max_tokens < long_stream_tokens (the per-chunk cost)")
        unknown = set(self.systems) - set(SYSTEMS)
        if unknown:
            raise ValueError(f"unknown systems {sorted(unknown)}; known: {list(SYSTEMS)}")
        unknown_modes = set(self.modes) - set(MODES)
        if unknown_modes:
            raise ValueError(f"unknown modes {sorted(unknown_modes)}; known: {list(MODES)}")
        for name in self.systems:
            baseline = SYSTEM_SPECS[name].baseline
            if baseline not in self.systems:
                raise ValueError(f"`{baseline}` is the baseline of `{name}`; add it to systems")
        if self.profile_system not in SYSTEMS or SYSTEM_SPECS[self.profile_system].family in (
            "direct",
            "proxy",
        ):
            raise ValueError("profile_system must be a Switchyard system")

    def warmup_for(self, concurrency: int) -> int:
        return max(self.warmup_requests, 2 * concurrency)

    def tokens_for(self, mode: Mode) -> int:
        return self.long_stream_tokens if mode == "stream_long" else self.max_tokens

    def concurrencies_for(self, mode: Mode) -> tuple[int, ...]:
        if mode == "stream_long" and self.long_stream_concurrencies is not None:
            return self.long_stream_concurrencies
        return self.concurrencies

    def servers(self) -> tuple[ServerName, ...]:
        """The servers the chosen systems need (the simulator always), in start order."""
        wanted = {SYSTEM_SPECS[s].server for s in self.systems}
        order: tuple[ServerName, ...] = ("simulator", *GATEWAY_SERVERS, "litellm")
        return tuple(s for s in order if s in wanted or s == "simulator")


def quick_settings(**overrides: object) -> BenchSettings:
    """Every system and mode; concurrency 1 and 16, the long stream at 16 only; short windows."""
    quick: dict[str, object] = {
        "concurrencies": (1, HEADLINE_CONCURRENCY),
        "long_stream_concurrencies": (HEADLINE_CONCURRENCY,),
        "duration_s": 3.0,
        "warmup_requests": 20,
        "recording_rounds": 3,
        "ttft_rounds": 300,
        "store_records": 2_000,
        "quick": True,
    }
    quick.update(overrides)
    return dataclasses.replace(BenchSettings(), **quick)  # type: ignore[arg-type]
