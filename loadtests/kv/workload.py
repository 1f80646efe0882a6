"""An IDE-like trace of prefix-heavy requests, deterministic from a seed.

What an IDE's traffic to a code model looks like, and what each knob of :class:`KvWorkloadSpec`
models:

- Many concurrent *sessions* (a chat or agent thread), each owned by one *client* (an IDE
  install / API key) and opened on one *repository*.
- Every prompt starts with the client's system prompt (``system_tokens``; one per client), then
  the repository's context (``repo_tokens``: open files, symbols; shared by every session on that
  repository), then the conversation so far: each turn adds a user message (``user_tokens``
  range) and the previous answer (``answer_tokens``): the prompt grows turn by turn.
- Repository popularity is skewed: Zipf with exponent ``zipf_s`` over ``repos`` (a few hot
  repositories, a long tail).
- Sessions open as a Poisson process of rate ``session_rate`` per second, modulated by bursts:
  every ``burst_every_s`` (on average) a burst of ``burst_len_s`` multiplies the rate by
  ``burst_factor``. Later turns of a session follow after an exponential think time.

Prompts are token ids (``prompt_ids``), drawn per segment from a seeded generator inside
``[token_low, token_high)``, so the same segment always has the same ids: send them as
``/v1/completions`` prompts and vLLM hashes exactly these tokens. ``scaled(k)`` multiplies the
arrival rate by ``k`` on the same session structure (for load sweeps).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True, slots=True)
class KvWorkloadSpec:
    sessions: int = 400
    clients: int = 40
    repos: int = 60
    zipf_s: float = 1.1
    system_tokens: int = 384
    repo_tokens: int = 3_000
    user_tokens: tuple[int, int] = (40, 200)
    answer_tokens: int = 64
    turns: tuple[int, int] = (1, 6)
    session_rate: float = 2.0
    think_s: float = 8.0
    burst_every_s: float = 30.0
    burst_len_s: float = 4.0
    burst_factor: float = 4.0
    token_low: int = 300
    token_high: int = 8_000
    max_prompt_tokens: int | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True)
class KvRequest:
    """One request of the trace. ``segments`` name the prompt's parts, in order."""

    arrival_s: float
    session: str
    client: str
    repo: int
    turn: int
    segments: tuple[tuple[str, int, int], ...]  # (kind, id, tokens)
    max_tokens: int

    @property
    def prompt_tokens(self) -> int:
        return sum(n for _, _, n in self.segments)


class SegmentTokens:
    """Token ids of a segment, deterministic from (seed, kind, id, length); memoised compactly
    (2 bytes a token when ids fit, as they do for the demo tokenizer)."""

    def __init__(self, spec: KvWorkloadSpec) -> None:
        self.spec = spec
        self._typecode = "H" if spec.token_high <= 0x10000 else "I"
        self._cache: dict[tuple[str, int, int], array[int]] = {}

    def tokens(self, kind: str, ident: int, n: int) -> array[int]:
        key = (kind, ident, n)
        got = self._cache.get(key)
        if got is None:
            digest = hashlib.sha256(f"{self.spec.seed}/{kind}/{ident}/{n}".encode()).digest()
            rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
            ids = rng.integers(self.spec.token_low, self.spec.token_high, size=n)
            got = self._cache[key] = array(self._typecode, ids.tolist())
        return got

    def prompt_ids(self, request: KvRequest) -> list[int]:
        out: list[int] = []
        for kind, ident, n in request.segments:
            out.extend(self.tokens(kind, ident, n))
        return out


def _zipf_cdf(n: int, s: float) -> list[float]:
    weights = [1.0 / (k**s) for k in range(1, n + 1)]
    total = sum(weights)
    return list(itertools.accumulate(w / total for w in weights))


def _session_starts(spec: KvWorkloadSpec, rng: random.Random) -> Iterator[float]:
    """Poisson arrivals with bursts (a two-state modulated process)."""
    t = 0.0
    next_burst = rng.expovariate(1.0 / spec.burst_every_s)
    while True:
        in_burst = next_burst <= t < next_burst + spec.burst_len_s
        rate = spec.session_rate * (spec.burst_factor if in_burst else 1.0)
        t += rng.expovariate(rate)
        if t >= next_burst + spec.burst_len_s:
            next_burst = t + rng.expovariate(1.0 / spec.burst_every_s)
        yield t


def generate(spec: KvWorkloadSpec) -> list[KvRequest]:
    """The whole trace, ordered by arrival time."""
    rng = random.Random(spec.seed)
    repo_cdf = _zipf_cdf(spec.repos, spec.zipf_s)
    starts = _session_starts(spec, rng)
    out: list[KvRequest] = []
    for s in range(spec.sessions):
        t = next(starts)
        client = rng.randrange(spec.clients)
        repo = min(bisect.bisect_left(repo_cdf, rng.random()), spec.repos - 1)
        n_turns = rng.randint(*spec.turns)
        segments: list[tuple[str, int, int]] = [
            ("system", client, spec.system_tokens),
            ("repo", repo, spec.repo_tokens),
        ]
        for turn in range(n_turns):
            if turn:
                segments.append(("answer", s * 1000 + turn - 1, spec.answer_tokens))
                t += rng.expovariate(1.0 / spec.think_s)
            segments.append(("user", s * 1000 + turn, rng.randint(*spec.user_tokens)))
            request = KvRequest(
                arrival_s=t,
                session=f"s{s}",
                client=f"c{client}",
                repo=repo,
                turn=turn,
                segments=tuple(segments),
                max_tokens=spec.answer_tokens,
            )
            if spec.max_prompt_tokens is not None and (
                request.prompt_tokens + spec.answer_tokens > spec.max_prompt_tokens
            ):
                break
            out.append(request)
    out.sort(key=lambda r: r.arrival_s)
    return out


def scaled(trace: list[KvRequest], rate_factor: float) -> list[KvRequest]:
    """The same trace with every arrival time divided by ``rate_factor``."""
    return [replace(r, arrival_s=r.arrival_s / rate_factor) for r in trace]


def summary(trace: list[KvRequest]) -> dict[str, float]:
    """Size figures of a trace (for reports)."""
    if not trace:
        return {"requests": 0}
    span = trace[-1].arrival_s - trace[0].arrival_s
    tokens = sum(r.prompt_tokens for r in trace)
    return {
        "requests": len(trace),
        "sessions": len({r.session for r in trace}),
        "span_s": round(span, 2),
        "mean_prompt_tokens": round(tokens / len(trace), 1),
        "requests_per_s": round(len(trace) / span, 3) if span > 0 else 0.0,
    }
