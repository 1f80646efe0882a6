"""What one call cost in USD, cache reads and writes included, priced as the provider bills them.

Token counts follow OpenAI's convention (:class:`gateway.backends.base.Usage`): ``prompt_tokens``
counts every input token, cache reads (``cached_tokens``) and writes (``cache_creation_tokens``)
included. One formula prices every call::

    uncached = prompt_tokens - cache_reads - cache_writes          (never below 0)
    cost     = uncached * input + cache_reads * read + cache_writes * write + completion * output

Where the four rates come from, first match wins:

1. Configured prices: a back-end that sets ``input_usd_per_mtok`` or ``output_usd_per_mtok`` is
   priced from its config alone. A price left unset is 0, except the cache prices, which follow
   the provider's rule (:data:`CACHE_RULES`): Anthropic bills cache reads at 0.1x input and
   5-minute cache writes at 1.25x input; other providers bill both at the input price (OpenAI
   has no write charge; its read discount differs by model, so no rule can guess it).
2. litellm's price map, for ``kind: litellm`` back-ends: the entry of the model, found as litellm
   finds it (``provider/model``, then ``model``, then both without a ``-YYYY-MM-DD`` snapshot
   suffix or fine-tune id; exact key first, then case-insensitively; the entry's provider must
   be the back-end's). Rates per token: ``input_cost_per_token``, ``output_cost_per_token``,
   ``cache_read_input_token_cost``, ``cache_creation_input_token_cost``; a cache rate the entry
   lacks is its input rate (a provider that publishes none bills cached tokens as input: OpenAI
   entries have no write rate). Long context, as litellm's ``_get_token_base_cost``: for each
   ``<rate>_above_<N>[k]_tokens`` threshold that ``prompt_tokens`` exceeds, lowest first, the
   rates given at that threshold replace the current ones for every token of the call. Tier
   tables (``tiered_pricing``, e.g. dashscope), as litellm's ``_get_tiered_base_costs``: one
   tier, the one whose ``range_start < prompt_tokens <= range_end`` (else the last), prices
   every token; its missing cache rates are its input rate, a missing output rate the entry's.
3. Otherwise the cost is unknown: ``None`` (a ``vllm`` back-end without prices, a model the map
   does not have, an entry without token prices), never an error.

Not priced (a call's :class:`Usage` does not say them): service tiers, batch and off-peak rates,
regional, geo and ``fast`` multipliers, 1-hour cache writes (at the 5-minute rate), audio and image
tokens, per-character and per-second prices, and more (docs/compatibility.md, "What a call costs").

Why not ``litellm.cost_per_token``: importing litellm would cost the gateway's start and each
answer far more, and the old call billed cache reads and writes as input (docs/compatibility.md).
:meth:`PriceBook.load` reads the JSON price map bundled in litellm's package, as data, keeping only
the prices; ``tests/gateway/backends/test_pricing.py`` holds it to ``litellm.cost_per_token``.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from gateway.backends.base import Usage
    from gateway.config import BackendConfig

PRICE_MAP_FILE: Final = "model_prices_and_context_window_backup.json"
_PER_MTOK: Final = 1e-6  # configured prices are USD per million tokens


@dataclass(frozen=True, slots=True)
class CacheRule:
    """A provider's cache prices as multiples of its input price (configured prices only)."""

    read: float = 1.0
    write: float = 1.0


# Keyed by the provider prefix of ``BackendConfig.model``; a provider not listed bills cached
# input like any input (OpenAI, whose cached-input discount differs by model, and vLLM).
CACHE_RULES: Final[Mapping[str, CacheRule]] = MappingProxyType(
    {"anthropic": CacheRule(read=0.1, write=1.25)}  # writes: the 5-minute cache
)
_NO_RULE: Final = CacheRule()

_RATE_KEYS: Final = (
    ("input", "input_cost_per_token"),
    ("output", "output_cost_per_token"),
    ("cache_read", "cache_read_input_token_cost"),
    ("cache_write", "cache_creation_input_token_cost"),
)
_THRESHOLD_KEY: Final = re.compile(
    r"^(?:input_cost_per_token|output_cost_per_token|cache_read_input_token_cost"
    r"|cache_creation_input_token_cost)_above_(\d+(?:\.\d+)?k?)_tokens$"
)
# Keys of the map that are not models (see litellm's RESERVED_TOP_LEVEL_KEYS).
_NOT_MODELS: Final = frozenset({"sample_spec", "fallback_generalizations"})
_INCLUSIVE_THRESHOLDS: Final = frozenset({"xai"})
_SNAPSHOT_SUFFIX: Final = re.compile(r"-\d{4}-\d{2}-\d{2}$")
_FINE_TUNE_ID: Final = re.compile(r"(:[^:]*){3}$")


class PriceMapError(Exception):
    """litellm's price map cannot be found or read; the message says which file and why."""


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token; a cache rate of None is the input rate."""

    input: float
    output: float
    cache_read: float | None = None
    cache_write: float | None = None

    def with_given(self, given: Mapping[str, float]) -> Rates:
        """These rates with those in ``given`` (by field name) replacing them."""
        return replace(self, **given) if given else self


@dataclass(frozen=True, slots=True)
class Threshold:
    """Rates that apply to the whole call once ``prompt_tokens`` exceeds ``above``."""

    above: float
    given: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class TableTier:
    """One row of a ``tiered_pricing`` table: the rates for ``start < prompt_tokens <= end``."""

    start: float
    end: float
    input: float | None  # None: the row prices nothing, the entry's flat rates apply
    output: float | None
    cache_read: float | None
    cache_write: float | None


@dataclass(frozen=True, slots=True)
class ModelPrices:
    """The prices of one price-map entry."""

    provider: str | None
    base: Rates
    thresholds: tuple[Threshold, ...] = ()  # ascending
    table: tuple[TableTier, ...] = ()  # ascending by start
    max_input_tokens: int | None = None  # the model's context window, as the map gives it

    def rates_for(self, prompt_tokens: int) -> Rates:
        """The rates of a call with ``prompt_tokens`` input tokens (all of them)."""
        if self.table and prompt_tokens > 0:
            tier = next((t for t in self.table if t.start < prompt_tokens <= t.end), None)
            tier = tier or self.table[-1]
            if tier.input is not None:
                output = self.base.output if tier.output is None else tier.output
                return Rates(tier.input, output, tier.cache_read, tier.cache_write)
        # xAI bills the higher rates from the threshold itself on (litellm: inclusive providers).
        inclusive = self.provider in _INCLUSIVE_THRESHOLDS
        rates = self.base
        for threshold in self.thresholds:
            if prompt_tokens > threshold.above or (inclusive and prompt_tokens == threshold.above):
                rates = rates.with_given(threshold.given)
        return rates


def call_cost(rates: Rates, usage: Usage) -> float:
    """The formula of the module docstring."""
    prompt = usage.prompt_tokens or 0
    read = usage.cached_tokens or 0
    written = usage.cache_creation_tokens or 0
    uncached = max(prompt - read - written, 0)
    read_rate = rates.input if rates.cache_read is None else rates.cache_read
    write_rate = rates.input if rates.cache_write is None else rates.cache_write
    return (
        uncached * rates.input
        + read * read_rate
        + written * write_rate
        + (usage.completion_tokens or 0) * rates.output
    )


def provider_of(model: str) -> str | None:
    """The provider prefix of a ``provider/model`` name (None without one)."""
    provider, slash, _ = model.partition("/")
    return provider if slash else None


def configured_rates(config: BackendConfig) -> Rates | None:
    """The back-end's own prices as per-token rates; None when it sets neither main price."""
    if config.input_usd_per_mtok is None and config.output_usd_per_mtok is None:
        return None
    rule = CACHE_RULES.get(provider_of(config.model) or "", _NO_RULE)
    per_mtok_input = config.input_usd_per_mtok or 0.0
    read = config.cached_input_usd_per_mtok
    write = config.cache_write_usd_per_mtok
    return Rates(
        input=per_mtok_input * _PER_MTOK,
        output=(config.output_usd_per_mtok or 0.0) * _PER_MTOK,
        cache_read=(per_mtok_input * rule.read if read is None else read) * _PER_MTOK,
        cache_write=(per_mtok_input * rule.write if write is None else write) * _PER_MTOK,
    )


class PriceBook:
    """Prices of the price map's models, built once at startup; pricing a call is pure CPU.

    Build with :meth:`load` (blocking file read: call it off the event loop) or
    :meth:`from_map`; :meth:`empty` knows configured prices only.
    """

    def __init__(self, models: Mapping[str, ModelPrices]) -> None:
        self._models = dict(models)
        self._lower = {key.lower(): key for key in self._models}
        # Lookups by configured model name: a gateway has a handful, asked on every answer (the
        # lookup, uncached, was a visible share of a recording gateway's CPU:
        # docs/compatibility.md). Bounded: cleared when it fills up.
        self._found: dict[str, ModelPrices | None] = {}

    @classmethod
    def empty(cls) -> PriceBook:
        return cls({})

    @classmethod
    def from_map(cls, price_map: Mapping[str, Any]) -> PriceBook:
        """From litellm's price map as parsed JSON; entries without token prices are left out."""
        models: dict[str, ModelPrices] = {}
        for key, entry in price_map.items():
            if key in _NOT_MODELS or not isinstance(entry, Mapping):
                continue
            prices = _entry_prices(entry)
            if prices is not None:
                models[key] = prices
        return cls(models)

    @classmethod
    def load(cls, path: Path | None = None) -> PriceBook:
        """Read the price map bundled with litellm (or ``path``) without importing litellm.

        Raises :class:`PriceMapError` when the file is missing or is not a JSON object."""
        path = path or bundled_price_map()
        try:
            data = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise PriceMapError(f"cannot read litellm's price map {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise PriceMapError(f"litellm's price map {path} is not a JSON object")
        return cls.from_map(data)

    def __len__(self) -> int:
        return len(self._models)

    def model_prices(self, model: str) -> ModelPrices | None:
        """The entry of a ``provider/model`` name, looked up as litellm does (module docstring)."""
        try:
            return self._found[model]
        except KeyError:
            pass
        if len(self._found) >= _FOUND_MAX:
            self._found.clear()
        found = self._found[model] = self._look_up(model)
        return found

    def _look_up(self, model: str) -> ModelPrices | None:
        provider = provider_of(model)
        bare = model.partition("/")[2] if provider else model
        stripped = _strip_version(bare)
        candidates = [model, bare, f"{provider}/{stripped}", stripped] if provider else [model]
        for name in dict.fromkeys(candidates):
            key = name if name in self._models else self._lower.get(name.lower())
            if key is None:
                continue
            prices = self._models[key]
            if provider is None or prices.provider in (None, provider):
                return prices
        return None

    def unpriced(self, backends: Mapping[str, BackendConfig]) -> list[str]:
        """The ``kind: litellm`` back-ends this book cannot price: no configured prices and no
        entry in the map (a retired model, a name the map spells otherwise). Their calls are
        recorded with an unknown cost, which the operator should hear of at start-up."""
        return [
            name
            for name, config in backends.items()
            if config.kind == "litellm"
            and configured_rates(config) is None
            and self.model_prices(config.model) is None
        ]

    def max_input_tokens(self, config: BackendConfig) -> int | None:
        """The target's context window: configured, else the map's ``max_input_tokens`` for
        ``kind: litellm`` (the entry found as for its prices), else None (unknown)."""
        if config.max_input_tokens is not None or config.kind != "litellm":
            return config.max_input_tokens
        prices = self.model_prices(config.model)
        return prices.max_input_tokens if prices is not None else None

    def cost_usd(self, config: BackendConfig, usage: Usage) -> float | None:
        """The call's cost: configured prices, else the map's for ``kind: litellm``, else None."""
        rates = configured_rates(config)
        if rates is None and config.kind == "litellm":
            prices = self.model_prices(config.model)
            rates = prices.rates_for(usage.prompt_tokens or 0) if prices else None
        return None if rates is None else call_cost(rates, usage)


_FOUND_MAX = 1024


def bundled_price_map() -> Path:
    """The price map file inside the installed litellm package (found, not imported)."""
    # find_spec of a top-level name reads the import path only; it runs no package code.
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        raise PriceMapError("litellm is not installed: its price map is where prices come from")
    return Path(next(iter(spec.submodule_search_locations))) / PRICE_MAP_FILE


def _strip_version(name: str) -> str:
    if "ft:" in name:
        return _FINE_TUNE_ID.sub("", name)
    return _SNAPSHOT_SUFFIX.sub("", name)


def _rate(value: object) -> float | None:
    """A per-token price of the map: a number, or a string holding one (litellm reads both)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _given(entry: Mapping[str, Any], suffix: str = "") -> dict[str, float]:
    out = {}
    for name, key in _RATE_KEYS:
        value = _rate(entry.get(key + suffix))
        if value is not None:
            out[name] = value
    return out


def _threshold_tokens(label: str) -> float:
    return float(label.removesuffix("k")) * (1000 if label.endswith("k") else 1)


def _entry_prices(entry: Mapping[str, Any]) -> ModelPrices | None:
    base = _given(entry)
    table = _table(entry.get("tiered_pricing"))
    if "input" not in base and "output" not in base and not table:
        return None
    labels = {m.group(1) for key in entry if "_above_" in key and (m := _THRESHOLD_KEY.match(key))}
    thresholds = tuple(
        Threshold(_threshold_tokens(label), MappingProxyType(given))
        for label in sorted(labels, key=_threshold_tokens)
        if (given := _given(entry, f"_above_{label}_tokens"))
    )
    provider = entry.get("litellm_provider")
    window = entry.get("max_input_tokens")
    return ModelPrices(
        provider=provider if isinstance(provider, str) else None,
        max_input_tokens=window if type(window) is int and window > 0 else None,
        base=Rates(
            base.get("input", 0.0),
            base.get("output", 0.0),
            base.get("cache_read"),
            base.get("cache_write"),
        ),
        thresholds=thresholds,
        table=table,
    )


def _table(value: object) -> tuple[TableTier, ...]:
    """A ``tiered_pricing`` table; rows without a two-number range are skipped."""
    if not isinstance(value, list):
        return ()
    tiers = []
    for row in value:
        if not isinstance(row, Mapping):
            continue
        bounds = row.get("range")
        given = _given(row)
        if not isinstance(bounds, list) or len(bounds) != 2:
            continue
        start, end = _rate(bounds[0]), _rate(bounds[1])
        if start is None or end is None:
            continue
        tiers.append(
            TableTier(
                start,
                end,
                given.get("input"),
                given.get("output"),
                given.get("cache_read"),
                given.get("cache_write"),
            )
        )
    return tuple(sorted(tiers, key=lambda t: t.start))
