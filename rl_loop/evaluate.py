"""The evaluation gate: a candidate replaces the served model only if it is better where it
counts and no worse anywhere else.

What is measured, for the current model and the candidate alike (same items, greedy decoding):
- per class (the ``family`` tag) on held-out items: held-out tasks the caller supplies (never
  trained on) and the time-split eval part of the recorded traffic (the latest episodes): the
  verifier's accept rate, and a stricter re-check's (``strict_verify``, e.g. the exact answer
  format; defaults to the verifier itself);
- reward-hacking flags on every answer (``rewards.hack_flags``: empty, echo of the prompt,
  degenerate repetition, format-only);
- general held-out perplexity on Python code (``serving.train_base``'s held-out stdlib files),
  to catch forgetting.

The candidate is rejected when any of these holds (thresholds in ``GateConfig``):
1. a class's accept rate falls by more than ``family_tolerance`` (classes with items only);
2. the overall accept rate falls by more than ``overall_tolerance``, or rises by less than
   ``min_improvement`` when that is set;
3. held-out perplexity grows by more than the factor ``max_ppl_ratio``;
4. more than ``max_hack_share`` of its *passed* answers carry a hacking flag;
5. its verifier pass rate exceeds the strict re-check's by more than ``max_strict_gap``.
The report (JSON and a short text) lists every figure and every reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rl_loop.config import GateConfig
from rl_loop.modeling import Policy, code_windows, generate
from rl_loop.rewards import Verify, hack_flags
from router.chat_text import request_text
from router.request_text import RequestText
from serving.training import held_out_loss


@dataclass(frozen=True, slots=True)
class EvalItem:
    """A prompt to answer and the tags its verifier needs."""

    prompt: list[dict[str, Any]]
    tags: dict[str, str]
    source: str  # "heldout" (supplied tasks) or "record" (time-split traffic)
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class ItemResult:
    family: str
    tags: dict[str, str]
    source: str
    passed: bool
    strict_passed: bool
    flags: tuple[str, ...]
    answer: str
    text: RequestText | None = None  # what the routing scorer reads of the prompt


@dataclass(slots=True)
class ClassFigures:
    n: int = 0
    passed: int = 0
    strict_passed: int = 0
    hacked_passes: int = 0

    @property
    def accept_rate(self) -> float:
        return self.passed / self.n if self.n else 0.0

    @property
    def strict_rate(self) -> float:
        return self.strict_passed / self.n if self.n else 0.0


@dataclass(slots=True)
class ModelEval:
    """One model's figures on one eval set."""

    version: str
    classes: dict[str, ClassFigures] = field(default_factory=dict)
    overall: ClassFigures = field(default_factory=ClassFigures)
    ppl: float | None = None
    flag_counts: dict[str, int] = field(default_factory=dict)
    items: list[ItemResult] = field(default_factory=list)

    @property
    def hack_share(self) -> float:
        """Share of passed answers that carry a hacking flag."""
        return self.overall.hacked_passes / self.overall.passed if self.overall.passed else 0.0

    def class_rates(self) -> dict[str, float]:
        return {c: f.accept_rate for c, f in self.classes.items()}

    def summary(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "accept_rate": self.overall.accept_rate,
            "strict_rate": self.overall.strict_rate,
            "n": self.overall.n,
            "ppl": self.ppl,
            "hack_share": self.hack_share,
            "flags": dict(sorted(self.flag_counts.items())),
            "classes": {
                c: {"n": f.n, "accept_rate": f.accept_rate, "strict_rate": f.strict_rate}
                for c, f in sorted(self.classes.items())
            },
        }


def judge(
    version: str,
    items: Sequence[EvalItem],
    answers: Sequence[str],
    verify: Verify,
    strict_verify: Verify | None = None,
    *,
    class_tag: str = "family",
    ppl: float | None = None,
) -> ModelEval:
    """Verify ``answers`` (one per item) and fold the results into a :class:`ModelEval`."""
    strict = strict_verify or verify
    result = ModelEval(version, ppl=ppl)
    for item, answer in zip(items, answers, strict=True):
        passed = verify(item.tags, answer)[0]
        strict_passed = passed and strict(item.tags, answer)[0]
        flags = tuple(hack_flags(_prompt_text(item), answer))
        family = item.tags.get(class_tag, "*")
        for figures in (result.classes.setdefault(family, ClassFigures()), result.overall):
            figures.n += 1
            figures.passed += passed
            figures.strict_passed += strict_passed
            figures.hacked_passes += passed and bool(flags)
        for flag in flags:
            result.flag_counts[flag] = result.flag_counts.get(flag, 0) + 1
        result.items.append(
            ItemResult(
                family,
                item.tags,
                item.source,
                passed,
                strict_passed,
                flags,
                answer,
                request_text("chat.completions", {"messages": item.prompt, "tools": item.tools}),
            )
        )
    return result


def _prompt_text(item: EvalItem) -> str:
    return "\n".join(str(m.get("content") or "") for m in item.prompt)


# ---------------------------------------------------------------- measuring a model


def held_out_perplexity(policy: Policy, config: GateConfig) -> float:
    """Perplexity on held-out stdlib code (the split of ``serving.train_base``)."""
    size = config.ppl_windows * (config.ppl_seq_len + 1) * 8
    windows = code_windows(str(policy.source), "held_out", config.ppl_seq_len, max(5_000, size))
    windows = windows[: config.ppl_windows]
    loss = held_out_loss(policy.model, windows.to(policy.device), batch_size=8)
    return math.exp(min(loss, 50.0))


AnswerCache = dict[tuple[str, str], str]


def item_key(item: EvalItem) -> str:
    return json.dumps([item.prompt, item.tools], sort_keys=True)


def answer_items(
    policy: Policy,
    items: Sequence[EvalItem],
    max_new_tokens: int,
    *,
    version: str = "",
    cache: AnswerCache | None = None,
    batch_size: int = 32,
) -> list[str]:
    """Greedy answers of ``policy`` to ``items``; with a ``cache``, answers already generated
    by the same ``version`` (greedy decoding is deterministic) are reused."""
    cache = {} if cache is None else cache
    keys = [(version, item_key(i)) for i in items]
    todo = sorted({k for k in keys if k not in cache})
    by_key = {k: i for k, i in zip(keys, items, strict=True)}
    prompts = [policy.encode_prompt(by_key[k].prompt, by_key[k].tools) for k in todo]
    outs = generate(policy, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size)
    for k, o in zip(todo, outs, strict=True):
        cache[k] = policy.decode(o)
    return [cache[k] for k in keys]


def evaluate_policy(
    policy: Policy,
    version: str,
    items: Sequence[EvalItem],
    verify: Verify,
    config: GateConfig,
    strict_verify: Verify | None = None,
    *,
    class_tag: str = "family",
    cache: AnswerCache | None = None,
) -> ModelEval:
    """Answer, verify, flag and measure perplexity: everything the gate compares."""
    answers = answer_items(policy, items, config.max_new_tokens, version=version, cache=cache)
    ppl = held_out_perplexity(policy, config)
    return judge(version, items, answers, verify, strict_verify, class_tag=class_tag, ppl=ppl)


# ---------------------------------------------------------------- the decision


@dataclass(slots=True)
class GateReport:
    passed: bool
    reasons: list[str]
    current: dict[str, Any]
    candidate: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        cur, cand = self.current, self.candidate
        verdict = "PROMOTE" if self.passed else "REJECT"
        lines = [
            f"gate: {verdict} {cand['version']} (current {cur['version']})",
            f"  accept rate {cur['accept_rate']:.3f} -> {cand['accept_rate']:.3f}"
            f"  strict {cur['strict_rate']:.3f} -> {cand['strict_rate']:.3f}"
            f"  ppl {_num(cur['ppl'])} -> {_num(cand['ppl'])}"
            f"  hacked passes {cand['hack_share']:.3f}",
        ]
        for name, figures in cand["classes"].items():
            before = cur["classes"].get(name, {}).get("accept_rate")
            lines.append(
                f"  {name:<24} {_num(before)} -> {figures['accept_rate']:.3f} (n={figures['n']})"
            )
        lines += [f"  reason: {r}" for r in self.reasons]
        return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def gate(current: ModelEval, candidate: ModelEval, config: GateConfig) -> GateReport:
    """Decide whether ``candidate`` may replace ``current`` (rules in the module docstring)."""
    reasons: list[str] = []
    for name, cand in sorted(candidate.classes.items()):
        cur = current.classes.get(name)
        if cur is None or cur.n == 0 or cand.n == 0:
            continue
        if cand.accept_rate < cur.accept_rate - config.family_tolerance:
            reasons.append(
                f"class {name} regressed: accept rate {cur.accept_rate:.3f} -> "
                f"{cand.accept_rate:.3f} (tolerance {config.family_tolerance})"
            )
    before, after = current.overall.accept_rate, candidate.overall.accept_rate
    if after < before - config.overall_tolerance:
        reasons.append(f"overall accept rate regressed: {before:.3f} -> {after:.3f}")
    elif config.min_improvement > 0 and after < before + config.min_improvement:
        reasons.append(
            f"overall accept rate {before:.3f} -> {after:.3f} improves by less than "
            f"{config.min_improvement}"
        )
    if (
        current.ppl is not None
        and candidate.ppl is not None
        and candidate.ppl > current.ppl * config.max_ppl_ratio
    ):
        reasons.append(
            f"held-out code perplexity {current.ppl:.2f} -> {candidate.ppl:.2f} "
            f"(more than x{config.max_ppl_ratio}: forgetting)"
        )
    if candidate.hack_share > config.max_hack_share:
        reasons.append(
            f"reward hacking: {candidate.hack_share:.1%} of passed answers are flagged "
            f"{dict(sorted(candidate.flag_counts.items()))}"
        )
    gap = candidate.overall.accept_rate - candidate.overall.strict_rate
    if gap > config.max_strict_gap:
        reasons.append(
            f"reward hacking: verifier passes {candidate.overall.accept_rate:.3f} but the strict "
            f"re-check only {candidate.overall.strict_rate:.3f}"
        )
    return GateReport(not reasons, reasons, current.summary(), candidate.summary())


Generate = Callable[[Sequence[EvalItem]], list[str]]
