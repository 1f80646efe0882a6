"""The hot swap's prefix-cache check: its verdict on answers, the requests it sends, and a real
vLLM CPU replica answering the same from its cache as from scratch.

A replica whose cache went stale (blocks of old weights read after a reload) is shown on real
vLLM in test_hotswap.py; here a stale cache is an `httpx.MockTransport` replica.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from serving.logprob_probe import checkpoint_probe
from serving.prefix_cache_check import (
    Answer,
    CacheCheckFailed,
    CacheCheckSettings,
    PrefixCacheCheck,
    answer_differences,
    check_prompt,
    compare_answers,
    parse_answer,
)
from serving.swap_checks import HotSwapError, ProbeTolerance
from tests.fixtures.vllm_fixture import RunningVllm

BOUND = ProbeTolerance()


def answer(
    tokens: list[int], logprobs: list[float], cached: int | None = 0, gap: float = 0.5
) -> Answer:
    # Each step's alternatives: the chosen token, then token 99 `gap` nats below.
    tops = tuple({t: lp, 99: lp - gap} for t, lp in zip(tokens, logprobs, strict=True))
    return Answer(tuple(tokens), tuple(logprobs), tops, cached)


def test_check_prompt_repeats_the_probe_tokens_to_its_length() -> None:
    assert check_prompt([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    assert check_prompt([1, 2, 3], 2) == [1, 2]


def test_identical_answers_pass_with_zero_difference() -> None:
    reference = answer([5, 6, 7], [-1.0, -2.0, -0.5])
    result = compare_answers(reference, reference, reference, BOUND)
    assert result.passed and result.tokens == 6 and result.max_abs_diff == 0.0


def test_a_near_tie_flipped_by_numerics_passes_and_ends_the_comparison() -> None:
    """Each step counts the largest difference among both answers' top tokens, up to the first
    differing token (its context is still the same) and nothing after it."""
    reference = answer([5, 6, 7], [-1.0, -2.0, -0.5], gap=0.02)
    flipped = Answer(
        (5, 99, 3),
        (-1.01, -2.01, -9.0),
        ({5: -1.01, 99: -1.03}, {99: -2.01, 6: -2.015}, {3: -9.0}),
        0,
    )
    assert answer_differences(reference, flipped) == pytest.approx([0.01, 0.015])
    assert compare_answers(reference, flipped, reference, BOUND).passed


def test_stale_answers_beyond_the_bound_fail() -> None:
    reference = answer([5, 6, 7], [-1.0, -2.0, -0.5])
    drifted = answer([5, 6, 7], [-1.4, -2.5, -0.9], cached=480)
    result = compare_answers(reference, drifted, drifted, BOUND)
    assert not result.passed and result.mean_abs_diff == pytest.approx(0.4333, abs=1e-3)
    assert result.cold_cached_tokens == 480
    # A token listed on one side only is at most the other side's lowest listed logprob: token
    # 42 at -0.1 is at least 2.4 nats above its logprob in the reference (under -2.5).
    unseen = Answer((5, 42), (-1.0, -0.1), ({5: -1.0, 99: -1.5}, {42: -0.1, 99: -0.6}), 0)
    assert answer_differences(reference, unseen) == pytest.approx([0.0, 2.4])


def test_a_cold_read_after_a_reset_fails_however_close_the_answers() -> None:
    """Right after a reset a drained replica can hold only blocks of the old weights: a cold
    answer that read any is stale even where the model barely tells the weights apart."""
    reference = answer([5, 6, 7], [-1.0, -2.0, -0.5])
    cold = answer([5, 6, 7], [-1.0, -2.0, -0.5], cached=480)
    assert compare_answers(reference, cold, cold, BOUND).passed  # the preflight: no reset
    result = compare_answers(reference, cold, cold, BOUND, after_reset=True)
    assert result.survived_reset and not result.passed and result.max_abs_diff == 0.0
    assert "blocks survived the prefix-cache reset" in str(CacheCheckFailed(result))


def stale_replica(seen: list[dict[str, Any]]) -> httpx.MockTransport:
    """A replica whose prefix cache serves old weights: unsalted requests (cache hits) answer
    other tokens than a salted one (computed from scratch)."""

    def handle(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        fresh = "cache_salt" in body
        tokens = [7, 8, 9, 10][: body["max_tokens"]]
        lps = [-0.2 if fresh else -3.0] * len(tokens)
        logprobs = {
            "tokens": [f"token_id:{t}" for t in tokens],
            "token_logprobs": lps,
            "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(tokens, lps, strict=True)],
        }
        usage = {"prompt_tokens_details": {"cached_tokens": 0 if fresh else 480}}
        return httpx.Response(200, json={"choices": [{"logprobs": logprobs}], "usage": usage})

    return httpx.MockTransport(handle)


async def test_a_stale_cache_fails_and_no_request_asks_for_prompt_logprobs() -> None:
    seen: list[dict[str, Any]] = []
    settings = CacheCheckSettings(prompt_tokens=40, max_tokens=4)
    async with httpx.AsyncClient(transport=stale_replica(seen)) as client:
        check = PrefixCacheCheck(client, "m", [1, 2, 3], settings)
        await check.seed_cache("http://replica")
        result = await check.check_cached_prefix("http://replica", BOUND, after_reset=True)
    assert not result.passed and result.max_abs_diff == pytest.approx(2.8)
    assert result.survived_reset
    assert (result.cold_cached_tokens, result.warm_cached_tokens) == (480, 480)
    seed, cold = seen[:2]
    assert seed["max_tokens"] == 1 and cold["max_tokens"] == 4
    assert all("prompt_logprobs" not in body for body in seen)  # it would skip cache reads
    assert [("cache_salt" in body) for body in seen] == [False, False, True, False]
    assert all(body["prompt"] == check_prompt([1, 2, 3], 40) for body in seen)
    assert all(body["temperature"] == 0 and body["ignore_eos"] for body in seen)


async def test_a_refused_request_is_a_hot_swap_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(400, text="too long"))
    async with httpx.AsyncClient(transport=transport) as client:
        check = PrefixCacheCheck(client, "m", [1, 2], CacheCheckSettings())
        with pytest.raises(HotSwapError, match="400"):
            await check.check_cached_prefix("http://replica", BOUND, after_reset=True)


@pytest.mark.slow
async def test_a_real_replica_answers_the_same_from_its_cache(vllm_replica: RunningVllm) -> None:
    probe = checkpoint_probe(vllm_replica.model_dir)
    async with httpx.AsyncClient(timeout=120) as client:
        check = PrefixCacheCheck(
            client, vllm_replica.served_model_name, probe.prompt_token_ids, CacheCheckSettings()
        )
        await check.seed_cache(vllm_replica.base_url)
        result = await check.check_cached_prefix(vllm_replica.base_url, BOUND, after_reset=False)
        # The salted reference read nothing cached; the unsalted answers read nearly the whole
        # 512-token prompt (whole 32-token blocks, the last token recomputed).
        salted = await check.answer(vllm_replica.base_url, cache_salt="another-salt")
    assert result.passed, result
    assert salted.cached_tokens == 0
    assert result.warm_cached_tokens is not None and result.warm_cached_tokens >= 480
    assert result.cold_cached_tokens == result.warm_cached_tokens  # seeded: no reset here


def test_parse_answer_reads_token_ids_and_cached_tokens() -> None:
    payload = {
        "choices": [
            {
                "logprobs": {
                    "tokens": ["token_id:4"],
                    "token_logprobs": [-0.5],
                    "top_logprobs": [{"token_id:4": -0.5, "token_id:2": -1.5}],
                }
            }
        ],
        "usage": {"prompt_tokens_details": None},
    }
    parsed = parse_answer(payload)
    assert parsed == Answer((4,), (-0.5,), ({4: -0.5, 2: -1.5},), None)
