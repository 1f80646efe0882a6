"""Rewards as plain functions ``(completions, **context) -> list[float]`` (TRL's convention).

``completions`` are answer texts; ``context`` carries per-completion lists keyed by name (TRL
passes dataset columns the same way): ``tags`` (the request's tags), ``feedback`` (the recorded
feedback summary of an RL-prompt record), ``prompts`` (the prompt text). Functions take what
they need and ignore the rest (``**_``). Scale, in the style of Cursor Tab: +0.75 for an
accepted answer, -0.25 for a rejected one, 0 when nothing is known.

- :func:`verifier_reward`: the injected verifier (``verify(tags, answer) -> (passed, feedback)``,
  e.g. the task families' checkers) judges each answer. The RL phase's main signal.
- :func:`feedback_reward`: the recorded user reaction to a recorded answer (accepted / rejected;
  an edit counts as rejected). For answers that were actually shown to users.
- :func:`degenerate_reward`: a penalty for answers that game lenient checks (empty, echoing the
  prompt, degenerate repetition, format-only); see :func:`hack_flags`.
- :func:`combine`: a weighted sum of reward functions.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

ACCEPTED = 0.75
REJECTED = -0.25

Verify = Callable[[Mapping[str, str], str], tuple[bool, str]]


#: ``(completions, **context) -> one reward per completion``.
RewardFunc = Callable[..., list[float]]


def verifier_reward(
    completions: Sequence[str],
    *,
    tags: Sequence[Mapping[str, str]],
    verify: Verify,
    accepted: float = ACCEPTED,
    rejected: float = REJECTED,
    **_: Any,
) -> list[float]:
    """``accepted`` when ``verify(tags, completion)`` passes, else ``rejected``."""
    return [
        accepted if verify(t, c)[0] else rejected for c, t in zip(completions, tags, strict=True)
    ]


def feedback_reward(
    completions: Sequence[str],
    *,
    feedback: Sequence[Mapping[str, Any]],
    accepted: float = ACCEPTED,
    rejected: float = REJECTED,
    **_: Any,
) -> list[float]:
    """From recorded feedback summaries (``{"accepted": n, "rejected": n, "edited": n, ...}``):
    any rejection or edit -> ``rejected``; else an acceptance -> ``accepted``; else 0."""
    out: list[float] = []
    for fb in feedback:
        if fb.get("rejected") or fb.get("edited"):
            out.append(rejected)
        elif fb.get("accepted"):
            out.append(accepted)
        else:
            out.append(0.0)
    if len(out) != len(completions):
        raise ValueError("one feedback summary per completion is needed")
    return out


def degenerate_reward(
    completions: Sequence[str],
    *,
    prompts: Sequence[str] | None = None,
    penalty: float = REJECTED,
    **_: Any,
) -> list[float]:
    """``penalty`` for each completion :func:`hack_flags` flags, else 0."""
    texts = prompts if prompts is not None else [""] * len(completions)
    return [penalty if hack_flags(p, c) else 0.0 for c, p in zip(completions, texts, strict=True)]


def combine(
    funcs: Sequence[tuple[RewardFunc, float]], completions: Sequence[str], **context: Any
) -> list[float]:
    """Sum of ``weight * func(completions, **context)`` over ``funcs``."""
    total = [0.0] * len(completions)
    for func, weight in funcs:
        for i, value in enumerate(func(completions, **context)):
            total[i] += weight * value
    return total


# ---------------------------------------------------------------- reward-hacking flags

_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n?(.*?)```", re.DOTALL)
_WORD = re.compile(r"\w+")
MIN_REPEAT_LEN = 40  # shorter answers are too short to judge by repetition
REPEAT_RATIO = 0.25  # compressed / raw size below this = degenerate repetition
REPEAT_LINES = 4  # the same non-trivial line this many times = degenerate repetition


def _normalise(text: str) -> str:
    return " ".join(text.split())


def hack_flags(prompt: str, completion: str) -> list[str]:
    """Why ``completion`` looks like it games a checker rather than answers, or ``[]``.

    - ``empty``: nothing but whitespace;
    - ``format_only``: only fences, quotes and punctuation, no word or number;
    - ``echo``: the answer repeats the prompt's user message or its code block (a substring of
      the prompt is fine: naming a function shown in it is a right answer);
    - ``repetition``: one line repeated ``REPEAT_LINES`` times or more (or every line the same,
      three or more), or the text compresses below ``REPEAT_RATIO`` of its size (a token loop).
    """
    text = completion.strip()
    if not text:
        return ["empty"]
    flags: list[str] = []
    inner = " ".join(m.group(1) for m in _FENCE.finditer(text)) if "```" in text else text
    if not _WORD.search(inner):
        flags.append("format_only")
    body = _normalise(inner)
    if prompt and len(body) >= 20:
        blocks = [_normalise(m.group(1)) for m in _FENCE.finditer(prompt)]
        if body in blocks or (len(body) > 80 and body in _normalise(prompt)):
            flags.append("echo")
    all_lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    lines = [ln for ln in all_lines if len(ln) > 3]
    repeated = max((lines.count(ln) for ln in set(lines)), default=0)
    raw = text.encode()
    one_line_looped = len(all_lines) >= 3 and len(set(all_lines)) == 1
    if (
        one_line_looped
        or repeated >= REPEAT_LINES
        or (len(raw) >= MIN_REPEAT_LEN and len(zlib.compress(raw, 9)) / len(raw) < REPEAT_RATIO)
    ):
        flags.append("repetition")
    return flags
