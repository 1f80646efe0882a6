"""The hot swap's prefix-cache check: after new weights are in, a replica's answers read from its
prefix cache equal the answers it computes from scratch (:mod:`serving.hotswap`, step 5).

Why besides the logprob probe: the probe asks for `prompt_logprobs`, and vLLM never reads the
prefix cache for such a request (`SamplingParams.skip_reading_prefix_cache`), so it checks the
weights but no cached block. A KV block computed with the old weights that outlived the reset (a
tier the reset does not reach: LMCache's, docs/deploy.md) would go on serving cached prefixes
with the old weights' keys and values, unseen by the probe.

The check prompt is the probe prompt's tokens repeated to `prompt_tokens` (512: 16 CPU or 32 GPU
blocks, so nearly all of an answer's context comes from the cache on a hit). Every request is
greedy for `max_tokens` tokens past any EOS, with the `logprobs` of the generated tokens and
their `top_logprobs` best alternatives (ids as `token_id:N`); none asks for `prompt_logprobs`.

1. `seed_cache`, before the reload: the prompt once; its blocks are cached with the old weights.
2. `check_cached_prefix`, after the reload and the reset, before the probe (whose own blocks
   would be the check prompt's first ones):
   a. `cold`: the prompt as traffic sends it: it reads what the cache still holds of it (the old
      weights' blocks if the reset missed them; nothing if it worked, and it stores fresh ones);
   b. `reference`: the prompt with a random `cache_salt`, whose block hashes match no stored
      block (vllm/v1/core/kv_cache_utils.py): computed from scratch with the new weights;
   c. `warm`: the prompt as traffic sends it again: a cache hit on the blocks (a) stored.
3. `answer_differences` of (a) and of (c) against (b), step by step up to the first differing
   token (a near-tie flipped by numerics, or stale keys and values) included, nothing after it
   (the contexts differ): the largest |logprob difference| among both steps' top tokens. Passes
   within the probe's bound on mean and max (:func:`serving.swap_checks.probe_tolerance`) and,
   after a reset, only if (a) read no cached token: on a drained replica only blocks of the old
   weights can be there, however little they move the answers (`usage.prompt_tokens_details.
   cached_tokens`, which counts a KV connector's hits too: vllm/v1/metrics/stats.py).

A warm read of 0 cached tokens means the replica caches nothing (the check compares fresh
answers then). The preflight runs the check without a reset, on the weights served.
Limits: with data parallelism the three requests may reach engines with different caches;
whether LMCache honours `cache_salt` is LMCache's code, not checked here.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from serving.swap_checks import HotSwapError, ProbeTolerance

TOKEN_ID_PREFIX = "token_id:"  # vLLM's form of a token with return_tokens_as_token_ids


class CacheCheckSettings(BaseModel):
    """The check prompt and answers (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int = Field(
        default=512,
        ge=2,
        description="Check prompt length; with max_tokens it must fit the replicas' "
        "max_model_len (the preflight runs the check: too long stops a publish before any drain).",
    )
    max_tokens: int = Field(default=16, ge=1, description="Greedy tokens of every answer.")
    top_logprobs: int = Field(
        default=5, ge=1, le=20, description="Alternatives per token (vLLM's --max-logprobs: 20)."
    )


@dataclass(frozen=True)
class Answer:
    """One greedy answer: its tokens, their logprobs and each step's best alternatives."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[dict[int, float], ...]
    cached_tokens: int | None


@dataclass(frozen=True)
class CacheCheckResult:
    """Cached (cold and warm) against uncached answers on one replica."""

    tokens: int
    mean_abs_diff: float
    max_abs_diff: float
    cold_cached_tokens: int | None
    warm_cached_tokens: int | None
    survived_reset: bool
    passed: bool


class CacheCheckFailed(HotSwapError):
    """A replica's cached answers differ from its uncached ones beyond the bound, or blocks
    survived its prefix-cache reset."""

    def __init__(self, result: CacheCheckResult) -> None:
        survived = "blocks survived the prefix-cache reset; " if result.survived_reset else ""
        super().__init__(
            f"prefix-cache check failed: {survived}mean |diff| {result.mean_abs_diff:.4f}, max "
            f"{result.max_abs_diff:.4f} (cached tokens: cold {result.cold_cached_tokens}, warm "
            f"{result.warm_cached_tokens})"
        )
        self.result = result


def check_prompt(probe_token_ids: Sequence[int], length: int) -> list[int]:
    """The probe prompt's tokens repeated to `length` tokens."""
    repeats = -(-length // len(probe_token_ids))
    return (list(probe_token_ids) * repeats)[:length]


def step_difference(reference: dict[int, float], answer: dict[int, float]) -> float:
    """The largest |logprob difference| over the tokens of either step's top logprobs; a token
    listed on one side only is at most the other side's lowest listed logprob there, which
    bounds its difference from below."""
    reference_floor, answer_floor = min(reference.values()), min(answer.values())
    worst = 0.0
    for token in reference.keys() | answer.keys():
        ours, theirs = reference.get(token), answer.get(token)
        if ours is not None and theirs is not None:
            worst = max(worst, abs(ours - theirs))
        elif ours is not None:
            worst = max(worst, ours - answer_floor)
        elif theirs is not None:
            worst = max(worst, theirs - reference_floor)
    return worst


def answer_differences(reference: Answer, answer: Answer) -> list[float]:
    """`step_difference` of every step up to the first differing token, that one included (its
    context is still the same); nothing after it, where the contexts differ."""
    diffs: list[float] = []
    steps = zip(reference.token_ids, answer.token_ids, strict=False)
    for i, (reference_id, answer_id) in enumerate(steps):
        diffs.append(step_difference(reference.top_logprobs[i], answer.top_logprobs[i]))
        if reference_id != answer_id:
            break
    return diffs


def compare_answers(
    reference: Answer,
    cold: Answer,
    warm: Answer,
    tolerance: ProbeTolerance,
    *,
    after_reset: bool = False,
) -> CacheCheckResult:
    """The check's verdict on the three answers (module docstring, step 3)."""
    diffs = answer_differences(reference, cold) + answer_differences(reference, warm)
    if not diffs:
        raise HotSwapError("the prefix-cache check's answers carry no tokens")
    mean, worst = sum(diffs) / len(diffs), max(diffs)
    survived = after_reset and bool(cold.cached_tokens)
    return CacheCheckResult(
        len(diffs),
        mean,
        worst,
        cold.cached_tokens,
        warm.cached_tokens,
        survived,
        mean <= tolerance.mean_abs and worst <= tolerance.max_abs and not survived,
    )


class PrefixCacheCheck:
    """The check's requests to one replica's OpenAI completions route."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        served_model_name: str,
        probe_token_ids: Sequence[int],
        settings: CacheCheckSettings,
    ) -> None:
        self.client = client
        self.model = served_model_name
        self.prompt = check_prompt(probe_token_ids, settings.prompt_tokens)
        self.settings = settings

    async def seed_cache(self, replica: str) -> None:
        """Step 1: the check prompt's blocks cached with the weights served now."""
        await self.answer(replica, max_tokens=1)

    async def check_cached_prefix(
        self, replica: str, tolerance: ProbeTolerance, *, after_reset: bool
    ) -> CacheCheckResult:
        """Steps 2 and 3 (module docstring): the verdict, passed or not; HotSwapError when a
        request fails. `after_reset`: the replica's prefix cache was just reset."""
        cold = await self.answer(replica)
        reference = await self.answer(replica, cache_salt=secrets.token_urlsafe(24))
        warm = await self.answer(replica)
        return compare_answers(reference, cold, warm, tolerance, after_reset=after_reset)

    async def answer(
        self, replica: str, *, max_tokens: int | None = None, cache_salt: str | None = None
    ) -> Answer:
        """The replica's greedy answer to the check prompt."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": self.prompt,
            "max_tokens": max_tokens or self.settings.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "logprobs": self.settings.top_logprobs,
            "return_tokens_as_token_ids": True,
        }
        if cache_salt is not None:
            body["cache_salt"] = cache_salt
        url = f"{replica}/v1/completions"
        response = await self.client.post(url, json=body)
        if response.status_code != 200:
            raise HotSwapError(f"POST {url} failed ({response.status_code}): {response.text}")
        return parse_answer(response.json())


def parse_answer(payload: dict[str, Any]) -> Answer:
    """An `Answer` from a completions response asked with `return_tokens_as_token_ids`."""
    logprobs = payload["choices"][0]["logprobs"]
    details = (payload.get("usage") or {}).get("prompt_tokens_details") or {}
    return Answer(
        token_ids=tuple(_token_id(t) for t in logprobs["tokens"]),
        logprobs=tuple(float(v) for v in logprobs["token_logprobs"]),
        top_logprobs=tuple(
            {_token_id(t): float(v) for t, v in (top or {token: logprob}).items()}
            for token, logprob, top in zip(
                logprobs["tokens"],
                logprobs["token_logprobs"],
                logprobs["top_logprobs"],
                strict=True,
            )
        ),
        cached_tokens=details.get("cached_tokens"),
    )


def _token_id(token: str) -> int:
    if not token.startswith(TOKEN_ID_PREFIX):
        raise HotSwapError(f"expected a {TOKEN_ID_PREFIX}N token, got {token!r}")
    return int(token.removeprefix(TOKEN_ID_PREFIX))
