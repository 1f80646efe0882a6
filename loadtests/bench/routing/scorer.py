"""Request-path cost and model comparison of the request scorer (``router/scorer.py``).

- :func:`bench_scorer`: featurize + score of one typical IDE request (a ~300-char system prompt,
  a ~1,500-char user turn holding code and an instruction), timed call by call in this process;
  the gateway runs the same call on its event loop, so its p99 is added to that loop's latency.
- :func:`compare_models`: every model kind fitted on the same examples and scored on the same
  held-out ones (AUC, log loss, fit time, predict p50/p99, file and memory size), plus a constant
  predictor (the local examples' weighted accept rate) as the floor.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, get_args

import numpy as np

from router.request_text import RequestText
from router.scorer import Example, ModelKind, Scorer, ScorerConfig, auc, fit, log_loss
from router.scorer_features import FeaturizerConfig

BENCH_SYSTEM = (
    "You are a coding assistant inside the user's IDE. Each request shows the file the user is "
    "editing and one instruction. Do exactly what the instruction asks. When the answer is code, "
    "reply with one fenced code block and nothing outside it; otherwise reply on a single line."
)

_BENCH_CODE = '''def merge_intervals(intervals, *, min_gap=0):
    """Merge overlapping [start, end] intervals; gaps below min_gap are closed too."""
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: (pair[0], pair[1]))
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start - last[1] <= min_gap:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return [tuple(pair) for pair in merged]


class IntervalIndex:
    def __init__(self, intervals):
        self._items = merge_intervals(intervals)
        self._starts = [start for start, _ in self._items]

    def covers(self, point):
        import bisect

        i = bisect.bisect_right(self._starts, point) - 1
        return i >= 0 and self._items[i][0] <= point <= self._items[i][1]

    def total_length(self):
        return sum(end - start for start, end in self._items)

    def gaps(self):
        """The uncovered stretches between consecutive intervals, in order."""
        pairs = zip(self._items, self._items[1:])
        return [(left[1], right[0]) for left, right in pairs if right[0] > left[1]]

    def __len__(self):
        return len(self._items)
'''

BENCH_USER = (
    f"File: intervals.py\n```python\n{_BENCH_CODE}```\n"
    "`covers` raises TypeError when the index is empty and point is None. Make it return False "
    "for None, keep the rest unchanged, and do not add new imports. Reply with the whole "
    "updated class in one code block."
)


def bench_request() -> RequestText:
    """The typical IDE request the benchmark scores."""
    return RequestText(
        system=BENCH_SYSTEM,
        last_user=BENCH_USER,
        turns=2,
        prompt_chars=len(BENCH_SYSTEM) + len(BENCH_USER),
    )


def _percentiles_us(ns: Sequence[int]) -> tuple[float, float]:
    p50, p99 = np.percentile(np.asarray(ns, dtype=np.float64) / 1000.0, [50, 99])
    return round(float(p50), 1), round(float(p99), 1)


def bench_scorer(n: int = 5000, seed: int = 0) -> dict[str, Any]:
    """Featurize + score ``n`` times (after a warm-up); latency in microseconds (wall clock and
    this thread's CPU time), sizes in bytes.

    The weights are random (the cost does not depend on their values; the vector is dense).
    """
    features = FeaturizerConfig()
    rng = np.random.default_rng(seed)
    weights = (rng.standard_normal(1 << features.dim_bits) * 0.1).astype(np.float32)
    scorer = Scorer("bench", "logreg", features, weights, 0.0)
    text = bench_request()
    for _ in range(min(n, 200)):
        scorer.predict_local(text)
    total: list[int] = []
    cpu: list[int] = []
    featurize: list[int] = []
    clock, cpu_clock = time.perf_counter_ns, time.thread_time_ns
    for _ in range(n):
        t0 = clock()
        scorer.featurizer.featurize(text)
        t1, c1 = clock(), cpu_clock()
        scorer.predict_local(text)
        total.append(clock() - t1)
        cpu.append(cpu_clock() - c1)
        featurize.append(t1 - t0)
    p50, p99 = _percentiles_us(total)
    c50, c99 = _percentiles_us(cpu)
    f50, f99 = _percentiles_us(featurize)
    return {
        "n": n,
        "prompt_chars": text.prompt_chars,
        "user_chars": len(text.last_user),
        "predict_p50_us": p50,
        "predict_p99_us": p99,
        # CPU time of the same calls: apart from the wall-clock p99 when other work preempts us
        "predict_cpu_p50_us": c50,
        "predict_cpu_p99_us": c99,
        "featurize_p50_us": f50,
        "featurize_p99_us": f99,
        "model_bytes": scorer.nbytes,
    }


def compare_models(
    train: Sequence[Example],
    heldout: Sequence[Example],
    seed: int = 0,
    config: ScorerConfig | None = None,
) -> list[dict[str, Any]]:
    """One row per model kind (and the constant floor), measured on the same data."""
    base = config or ScorerConfig()
    tests = [e for e in heldout if e.arm == "local"]
    labels = [e.accepted for e in tests]
    rows: list[dict[str, Any]] = []
    for kind in get_args(ModelKind):
        t0 = time.perf_counter()
        scorer = fit(train, "compare", seed, base.model_copy(update={"model": kind}))
        fit_s = time.perf_counter() - t0
        probs: list[float] = []
        ns: list[int] = []
        for e in tests:
            t1 = time.perf_counter_ns()
            probs.append(scorer.predict_local(e.text))
            ns.append(time.perf_counter_ns() - t1)
        p50, p99 = _percentiles_us(ns) if ns else (0.0, 0.0)
        rows.append(
            {
                "model": kind,
                "auc": round(auc(probs, labels), 4),
                "log_loss": round(log_loss(probs, labels), 4),
                "fit_s": round(fit_s, 3),
                "predict_p50_us": p50,
                "predict_p99_us": p99,
                "json_bytes": len(json.dumps(scorer.to_json(), separators=(",", ":"))),
                "model_bytes": scorer.nbytes,
            }
        )
    local = [e for e in train if e.arm == "local"]
    weight = sum(e.weight for e in local)
    rate = sum(e.weight for e in local if e.accepted) / weight if weight else 0.5
    rows.append(
        {
            "model": "constant",
            "auc": 0.5,
            "log_loss": round(log_loss([rate] * len(tests), labels), 4),
        }
    )
    return rows
