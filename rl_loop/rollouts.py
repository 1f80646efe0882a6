"""Rollouts: the served model's own samples, with the serving engine's per-token logprobs.

Each prompt is rendered with the checkpoint's chat template (exactly as the replicas render a
chat request) and sent as token ids to a replica's OpenAI ``/v1/completions`` with ``n`` samples,
``logprobs: 0`` (the sampled token's logprob) and ``return_tokens_as_token_ids`` (tokens come
back as ``token_id:<id>``, so no detokenize/retokenize round trip can shift them). Replicas are
called directly, not through the gateway: rollouts are training data, not user traffic, and must
not be recorded or routed. Prompts are spread round-robin over the replicas.

A teacher (a bigger model served by vLLM) scores the samples for on-policy distillation: each
prompt + completion is sent as token ids with ``prompt_logprobs: 0`` and ``max_tokens: 1``, and
the teacher's logprob of each completion token is read from the prompt logprobs
(``teacher_logprobs``). Teacher and student must share the tokenizer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from rl_loop.datasets import PromptRecord
from rl_loop.modeling import Policy


class RolloutError(Exception):
    """A replica refused or garbled a rollout request."""


@dataclass(frozen=True, slots=True)
class Rollout:
    """One sampled completion as the trainers take it: the rollout engine's logprob of each of
    its tokens, its reward and group (completions of one prompt share a group, the baseline's
    scope), the prompt with the verifier's feedback when it failed (the hint's teacher context)
    and a teacher's logprob of each token when one scored it (on-policy distillation)."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    rollout_logprobs: tuple[float, ...]
    group: str
    reward: float = 0.0
    hint_prompt_ids: tuple[int, ...] | None = None
    teacher_logprobs: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.completion_ids) != len(self.rollout_logprobs):
            raise ValueError("one rollout logprob per completion token is needed")
        if self.teacher_logprobs is not None and len(self.teacher_logprobs) != len(
            self.completion_ids
        ):
            raise ValueError("one teacher logprob per completion token is needed")


@dataclass(frozen=True, slots=True)
class Sample:
    """One sampled completion of ``record`` as the replica produced it."""

    record: PromptRecord
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str
    finish_reason: str


def _token_id(token: str) -> int:
    if not token.startswith("token_id:"):
        raise RolloutError(
            f"expected token_id:<n> tokens (return_tokens_as_token_ids), got {token}"
        )
    return int(token.removeprefix("token_id:"))


async def _sample(
    client: httpx.AsyncClient,
    replica: str,
    model: str,
    record: PromptRecord,
    prompt_ids: tuple[int, ...],
    *,
    n: int,
    temperature: float,
    max_tokens: int,
    seed: int,
    eos_id: int,
) -> list[Sample]:
    body = {
        "model": model,
        "prompt": list(prompt_ids),
        "n": n,
        "temperature": temperature,
        "top_p": 1.0,
        "max_tokens": max_tokens,
        "logprobs": 0,
        "return_tokens_as_token_ids": True,
        "seed": seed,
    }
    response = await client.post(f"{replica.rstrip('/')}/v1/completions", json=body)
    if response.status_code != 200:
        raise RolloutError(f"{replica}: {response.status_code} {response.text[:300]}")
    out: list[Sample] = []
    for choice in response.json()["choices"]:
        lp = choice.get("logprobs") or {}
        tokens = [_token_id(t) for t in lp.get("tokens") or []]
        logprobs = [float(v) for v in lp.get("token_logprobs") or []]
        if len(tokens) != len(logprobs):
            raise RolloutError(f"{replica}: {len(tokens)} tokens but {len(logprobs)} logprobs")
        if choice.get("finish_reason") == "stop" and (not tokens or tokens[-1] != eos_id):
            # Stopped at end-of-turn without listing it: the stop is part of the answer (and of
            # what RL should reinforce); its engine logprob is unknown (NaN: the trainer's own
            # is used, an IS ratio of 1).
            tokens.append(eos_id)
            logprobs.append(float("nan"))
        out.append(
            Sample(
                record,
                prompt_ids,
                tuple(tokens),
                tuple(logprobs),
                str(choice.get("text") or ""),
                str(choice.get("finish_reason") or ""),
            )
        )
    return out


async def collect_rollouts(
    replicas: Sequence[str],
    model: str,
    policy: Policy,
    records: Sequence[PromptRecord],
    *,
    samples_per_prompt: int,
    temperature: float,
    max_tokens: int,
    concurrency: int = 8,
    seed: int = 0,
    timeout_s: float = 300.0,
) -> list[Sample]:
    """``samples_per_prompt`` completions of each record, from ``replicas`` (base URLs)."""
    if not replicas:
        raise ValueError("rollouts need at least one replica URL")
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0)) as client:

        async def one(i: int, record: PromptRecord) -> list[Sample]:
            prompt_ids = policy.encode_prompt(record.prompt, record.tools)
            async with limit:
                return await _sample(
                    client,
                    replicas[i % len(replicas)],
                    model,
                    record,
                    prompt_ids,
                    n=samples_per_prompt,
                    temperature=temperature,
                    max_tokens=max_tokens,
                    seed=seed * 100_003 + i,
                    eos_id=policy.eos_id,
                )

        groups = await asyncio.gather(*(one(i, r) for i, r in enumerate(records)))
    return [s for group in groups for s in group]


def _teacher_row(choice: dict[str, Any], sample: Sample, teacher: str) -> tuple[float, ...]:
    rows = choice.get("prompt_logprobs") or []
    start = len(sample.prompt_ids)
    if len(rows) != start + len(sample.completion_ids):
        raise RolloutError(f"{teacher}: {len(rows)} prompt logprobs for {start} + completion")
    out = []
    for token, row in zip(sample.completion_ids, rows[start:], strict=True):
        entry = (row or {}).get(str(token))
        if entry is None:
            raise RolloutError(f"{teacher}: no prompt logprob for token {token}")
        out.append(float(entry["logprob"]))
    return tuple(out)


async def teacher_logprobs(
    teacher: str,
    model: str,
    samples: Sequence[Sample],
    *,
    concurrency: int = 8,
    timeout_s: float = 300.0,
) -> list[tuple[float, ...]]:
    """The teacher's logprob of each completion token of each sample (see the module
    docstring); ``teacher`` is the base URL of an OpenAI-compatible vLLM server."""
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=5.0)) as client:

        async def one(sample: Sample) -> tuple[float, ...]:
            body = {
                "model": model,
                "prompt": [*sample.prompt_ids, *sample.completion_ids],
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 0,
            }
            async with limit:
                response = await client.post(f"{teacher.rstrip('/')}/v1/completions", json=body)
            if response.status_code != 200:
                raise RolloutError(f"{teacher}: {response.status_code} {response.text[:300]}")
            return _teacher_row(response.json()["choices"][0], sample, teacher)

        return list(await asyncio.gather(*(one(s) for s in samples)))
