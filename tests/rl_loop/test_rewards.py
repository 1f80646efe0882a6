"""Rewards are plain functions (completions, **context) -> list[float] on the +0.75 / -0.25
scale, and the hacking flags catch empty, echoed, repetitive and format-only answers."""

from __future__ import annotations

from rl_loop.rewards import (
    ACCEPTED,
    REJECTED,
    combine,
    degenerate_reward,
    feedback_reward,
    hack_flags,
    verifier_reward,
)

PROMPT = (
    "File: util.py\n```python\ndef parse_header(line):\n    key, _, value = line.partition(':')\n"
    "    return key.strip(), value.strip()\n```\nWhat is the name of the function defined above?"
)


def exact(tags, answer):
    return (
        answer.strip() == tags["expected"],
        "ok" if answer.strip() == tags["expected"] else "no",
    )


def test_verifier_reward_scores_accepts_and_rejects():
    tags = [{"expected": "parse_header"}] * 3
    rewards = verifier_reward(["parse_header", "parse", ""], tags=tags, verify=exact)
    assert rewards == [ACCEPTED, REJECTED, REJECTED] == [0.75, -0.25, -0.25]


def test_feedback_reward_follows_recorded_reactions():
    feedback = [{"accepted": 1}, {"rejected": 1}, {"rejected": 1, "edited": 1}, {}]
    assert feedback_reward(["a", "b", "c", "d"], feedback=feedback) == [0.75, -0.25, -0.25, 0.0]


def test_unused_context_is_ignored_like_trl():
    assert feedback_reward(["a"], feedback=[{"accepted": 1}], prompts=["p"], tags=[{}]) == [0.75]


def test_hack_flags():
    assert hack_flags(PROMPT, "") == ["empty"]
    assert hack_flags(PROMPT, "   \n") == ["empty"]
    assert "format_only" in hack_flags(PROMPT, "```python\n```")
    echoed = (
        "```python\ndef parse_header(line):\n    key, _, value = line.partition(':')\n"
        "    return key.strip(), value.strip()\n```"
    )
    assert "echo" in hack_flags(PROMPT, echoed)
    assert "repetition" in hack_flags(PROMPT, "parse_header\n" * 6)
    assert "repetition" in hack_flags(PROMPT, "ab" * 100)


def test_honest_answers_are_not_flagged():
    # A name taken from the prompt is the right answer, not an echo.
    assert hack_flags(PROMPT, "parse_header") == []
    code = (
        "```python\ndef parse_header(text):\n    key, _, value = text.partition(':')\n"
        "    return key.strip(), value.strip()\n```"
    )
    assert hack_flags(PROMPT, code) == []


def test_degenerate_reward_and_combine():
    completions = ["parse_header", "x\n" * 10, ""]
    assert degenerate_reward(completions, prompts=[PROMPT] * 3) == [0.0, REJECTED, REJECTED]
    tags = [{"expected": "parse_header"}] * 3
    total = combine(
        [(verifier_reward, 1.0), (degenerate_reward, 0.5)],
        completions,
        tags=tags,
        verify=exact,
        prompts=[PROMPT] * 3,
    )
    assert total == [0.75, -0.25 - 0.125, -0.25 - 0.125]
