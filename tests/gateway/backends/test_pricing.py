"""Prices of calls with cache reads and writes, and context windows, from configured values and
from litellm's own price map read as data (``gateway/backends/pricing.py``), held to
``litellm.cost_per_token`` and ``litellm.get_model_info``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from gateway.backends.base import Usage
from gateway.backends.pricing import PriceBook, PriceMapError, bundled_price_map
from gateway.config import BackendConfig

OPENAI = "openai/gpt-4o"
ANTHROPIC = "anthropic/claude-sonnet-4-5"
TIERED = "openai/gpt-5.4"  # long-context prices above 272k prompt tokens
TABLE = "dashscope/qwen-flash"  # a tiered_pricing table


@pytest.fixture(scope="module")
def price_map() -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads(bundled_price_map().read_bytes())
    return data


@pytest.fixture(scope="module")
def book() -> PriceBook:
    return PriceBook.load()


def litellm_backend(model: str, **prices: float) -> BackendConfig:
    return BackendConfig(kind="litellm", model=model, **prices)


def entry(price_map: dict[str, Any], model: str) -> dict[str, float]:
    found: dict[str, float] = price_map[model.partition("/")[2]]
    return found


def test_openai_bills_cache_reads_at_the_cached_price_and_writes_as_input(
    book: PriceBook, price_map: dict[str, Any]
) -> None:
    e = entry(price_map, OPENAI)
    assert "cache_creation_input_token_cost" not in e  # OpenAI has no write charge
    usage = Usage(prompt_tokens=3000, completion_tokens=200, cached_tokens=1024)
    expected = (
        1976 * e["input_cost_per_token"]
        + 1024 * e["cache_read_input_token_cost"]
        + 200 * e["output_cost_per_token"]
    )
    assert book.cost_usd(litellm_backend(OPENAI), usage) == pytest.approx(expected)
    written = Usage(prompt_tokens=3000, completion_tokens=200, cache_creation_tokens=1024)
    expected = 3000 * e["input_cost_per_token"] + 200 * e["output_cost_per_token"]
    assert book.cost_usd(litellm_backend(OPENAI), written) == pytest.approx(expected)


def test_anthropic_bills_reads_and_writes_at_their_own_prices(
    book: PriceBook, price_map: dict[str, Any]
) -> None:
    e = entry(price_map, ANTHROPIC)
    assert e["cache_read_input_token_cost"] == pytest.approx(0.1 * e["input_cost_per_token"])
    assert e["cache_creation_input_token_cost"] == pytest.approx(1.25 * e["input_cost_per_token"])
    # prompt_tokens counts them all: 1000 uncached + 1500 read + 500 written.
    usage = Usage(3000, 200, cached_tokens=1500, cache_creation_tokens=500)
    expected = (
        1000 * e["input_cost_per_token"]
        + 1500 * e["cache_read_input_token_cost"]
        + 500 * e["cache_creation_input_token_cost"]
        + 200 * e["output_cost_per_token"]
    )
    assert book.cost_usd(litellm_backend(ANTHROPIC), usage) == pytest.approx(expected)


def test_long_context_prices_apply_to_every_token_above_the_threshold(
    book: PriceBook, price_map: dict[str, Any]
) -> None:
    e = entry(price_map, TIERED)
    backend = litellm_backend(TIERED)
    below = Usage(272_000, 100, cached_tokens=100_000)
    above = Usage(272_001, 100, cached_tokens=100_000)
    assert book.cost_usd(backend, below) == pytest.approx(
        172_000 * e["input_cost_per_token"]
        + 100_000 * e["cache_read_input_token_cost"]
        + 100 * e["output_cost_per_token"]
    )
    assert book.cost_usd(backend, above) == pytest.approx(
        172_001 * e["input_cost_per_token_above_272k_tokens"]
        + 100_000 * e["cache_read_input_token_cost_above_272k_tokens"]
        + 100 * e["output_cost_per_token_above_272k_tokens"]
    )


def test_a_tier_table_prices_the_whole_call_at_one_tier(
    book: PriceBook, price_map: dict[str, Any]
) -> None:
    low, high = price_map[TABLE]["tiered_pricing"]
    backend = litellm_backend(TABLE)
    cost = book.cost_usd(backend, Usage(int(low["range"][1]) + 1, 10))
    assert cost == pytest.approx(
        (low["range"][1] + 1) * high["input_cost_per_token"] + 10 * high["output_cost_per_token"]
    )
    small = book.cost_usd(backend, Usage(1000, 10, cached_tokens=500))
    # No cache price in the tier: cached tokens bill as the tier's input.
    expected = 1000 * low["input_cost_per_token"] + 10 * low["output_cost_per_token"]
    assert small == pytest.approx(expected)


def test_thresholds_stack_and_missing_rates_keep_the_previous_ones() -> None:
    book = PriceBook.from_map(
        {
            "m": {
                "litellm_provider": "p",
                "input_cost_per_token": 1.0,
                "output_cost_per_token": "2.0",  # litellm reads numbers written as strings
                "input_cost_per_token_above_10_tokens": 3.0,
                "cache_read_input_token_cost_above_10_tokens": 0.5,
                "output_cost_per_token_above_1k_tokens": 7.0,
                "input_cost_per_token_above_10_tokens_priority": 99.0,  # a service tier: unused
            },
            "sample_spec": {"input_cost_per_token": 0.0},
        }
    )
    backend = litellm_backend("p/m")
    assert book.cost_usd(backend, Usage(10, 1, cached_tokens=4)) == pytest.approx(10 + 2)
    assert book.cost_usd(backend, Usage(11, 1, cached_tokens=4)) == pytest.approx(7 * 3 + 2 + 2)
    assert book.cost_usd(backend, Usage(1001, 1)) == pytest.approx(1001 * 3 + 7)
    assert book.model_prices("sample_spec") is None and len(book) == 1


def test_the_model_is_found_as_litellm_finds_it(book: PriceBook) -> None:
    gpt4o = book.model_prices(OPENAI)
    assert gpt4o is not None
    assert book.model_prices("openai/GPT-4o") == gpt4o  # case-insensitively
    assert book.model_prices("openai/gpt-4o-2099-01-01") == gpt4o  # an unknown snapshot
    assert book.model_prices("anthropic/gpt-4o") is None  # another provider's entry
    assert book.model_prices("text-completion-openai/gpt-3.5-turbo-instruct") is not None


def test_configured_prices_win_and_cache_prices_follow_the_provider_rule(book: PriceBook) -> None:
    usage = Usage(3000, 200, cached_tokens=1500, cache_creation_tokens=500)
    explicit = litellm_backend(
        OPENAI,
        input_usd_per_mtok=2.0,
        output_usd_per_mtok=8.0,
        cached_input_usd_per_mtok=0.5,
        cache_write_usd_per_mtok=3.0,
    )
    expected = (1000 * 2.0 + 1500 * 0.5 + 500 * 3.0 + 200 * 8.0) / 1e6
    assert book.cost_usd(explicit, usage) == pytest.approx(expected)
    openai_rule = litellm_backend(OPENAI, input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)
    assert book.cost_usd(openai_rule, usage) == pytest.approx((3000 * 2.0 + 200 * 8.0) / 1e6)
    anthropic_rule = litellm_backend(ANTHROPIC, input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)
    expected = (1000 * 2.0 + 1500 * 0.2 + 500 * 2.5 + 200 * 8.0) / 1e6
    assert book.cost_usd(anthropic_rule, usage) == pytest.approx(expected)
    output_only = litellm_backend("openai/unknown-model", output_usd_per_mtok=1.0)
    assert book.cost_usd(output_only, usage) == pytest.approx(200 / 1e6)


def test_unknown_models_and_unpriced_local_targets_cost_nothing_known(book: PriceBook) -> None:
    usage = Usage(3000, 200, cached_tokens=1024)
    assert book.cost_usd(litellm_backend("openai/no-such-model"), usage) is None
    assert book.cost_usd(litellm_backend("anthropic/claude-3-5-haiku-latest"), usage) is None
    local = BackendConfig(kind="vllm", model="gpt-4o", replicas=["http://127.0.0.1:1"])
    assert book.cost_usd(local, usage) is None  # vLLM never reads the map
    priced = local.model_copy(update={"input_usd_per_mtok": 0.1, "output_usd_per_mtok": 0.2})
    assert book.cost_usd(priced, usage) == pytest.approx((3000 * 0.1 + 200 * 0.2) / 1e6)
    assert PriceBook.empty().cost_usd(litellm_backend(OPENAI), usage) is None


def test_a_missing_or_broken_price_map_is_an_error_that_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(PriceMapError, match=r"missing\.json"):
        PriceBook.load(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(PriceMapError, match="not a JSON object"):
        PriceBook.load(tmp_path / "list.json")


def test_loading_the_price_map_does_not_import_litellm() -> None:
    code = (
        "import sys; from gateway.backends.pricing import PriceBook; "
        "assert len(PriceBook.load()) > 1000; "
        "assert not [m for m in sys.modules if m.split('.')[0] == 'litellm'], 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[3])


@pytest.fixture(scope="module")
def litellm() -> Iterator[ModuleType]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the bundled map, no fetch
    import litellm as module

    yield module


@pytest.mark.parametrize(
    ("model", "usage"),
    [
        (OPENAI, Usage(3000, 200, cached_tokens=1024)),
        ("openai/gpt-4o-mini-2024-07-18", Usage(5000, 10, cached_tokens=2048)),
        ("openai/gpt-4o-2099-01-01", Usage(5000, 10, cached_tokens=2048)),
        (ANTHROPIC, Usage(3000, 200, cached_tokens=1500, cache_creation_tokens=500)),
        ("anthropic/claude-haiku-4-5", Usage(9000, 0, cache_creation_tokens=9000)),
        (TIERED, Usage(300_000, 200, cached_tokens=100_000)),
        ("openai/gpt-6-astra", Usage(300_000, 200, cached_tokens=100_000, cache_creation_tokens=5)),
        (TABLE, Usage(300_000, 10)),
        ("text-completion-openai/gpt-3.5-turbo-instruct", Usage(100, 10)),
    ],
)
def test_prices_match_litellm_cost_per_token(
    book: PriceBook, litellm: ModuleType, model: str, usage: Usage
) -> None:
    prompt, completion = litellm.cost_per_token(
        model=model,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cache_read_input_tokens=usage.cached_tokens or 0,
        cache_creation_input_tokens=usage.cache_creation_tokens or 0,
    )
    assert book.cost_usd(litellm_backend(model), usage) == pytest.approx(prompt + completion)


def test_frontier_backends_the_book_cannot_price_are_named(book: PriceBook) -> None:
    backends = {
        "priced-by-map": litellm_backend(OPENAI),
        "retired": litellm_backend("anthropic/claude-retired-9"),
        "priced-by-config": litellm_backend("anthropic/claude-retired-9", input_usd_per_mtok=3.0),
        "local": BackendConfig(kind="vllm", model="ours", replicas=["http://127.0.0.1:1"]),
    }
    assert book.unpriced(backends) == ["retired"]


@pytest.mark.parametrize(
    "model",
    [
        OPENAI,
        "openai/gpt-4o-mini",
        "openai/gpt-4o-mini-2024-07-18",
        ANTHROPIC,
        "anthropic/claude-haiku-4-5",
        "text-completion-openai/gpt-3.5-turbo-instruct",
    ],
)
def test_context_windows_are_what_litellms_get_model_info_says(
    book: PriceBook, litellm: ModuleType, model: str
) -> None:
    expected = litellm.get_model_info(model)["max_input_tokens"]
    assert isinstance(expected, int) and expected > 0
    assert book.max_input_tokens(litellm_backend(model)) == expected


def test_a_configured_window_wins_and_a_local_target_has_none_unless_configured(
    book: PriceBook,
) -> None:
    configured = litellm_backend(OPENAI).model_copy(update={"max_input_tokens": 9})
    assert book.max_input_tokens(configured) == 9
    assert book.max_input_tokens(litellm_backend("anthropic/claude-retired-9")) is None
    local = BackendConfig(kind="vllm", model="gpt-4o", replicas=["http://127.0.0.1:1"])
    assert book.max_input_tokens(local) is None
    assert book.max_input_tokens(local.model_copy(update={"max_input_tokens": 4096})) == 4096
