"""The gate: a candidate that regresses a class, forgets code, or games the verifier is rejected
with a report; an honest improvement is promoted."""

from __future__ import annotations

import json
from pathlib import Path

from rl_loop.config import GateConfig
from rl_loop.evaluate import EvalItem, answer_items, gate, judge
from rl_loop.modeling import load_policy

FAMILIES = {"naming": "parse_header", "math": "42"}


def items(per_family: int = 10) -> list[EvalItem]:
    out = []
    for family, expected in FAMILIES.items():
        for i in range(per_family):
            prompt = [{"role": "user", "content": f"task {family} {i}: what is it?"}]
            out.append(EvalItem(prompt, {"family": family, "expected": expected}, "heldout"))
    return out


def lenient(tags, answer):
    ok = tags["expected"] in answer
    return ok, "correct" if ok else "wrong"


def strict(tags, answer):
    ok = answer.strip() == tags["expected"]
    return ok, "correct" if ok else "not exactly the answer"


def answers(correct: dict[str, int], per_family: int = 10, style: str = "{}") -> list[str]:
    out = []
    for family, expected in FAMILIES.items():
        for i in range(per_family):
            out.append(style.format(expected) if i < correct[family] else "no idea")
    return out


CONFIG = GateConfig(family_tolerance=0.15, overall_tolerance=0.02, max_ppl_ratio=1.25)


def test_honest_improvement_passes():
    its = items()
    current = judge("v0", its, answers({"naming": 5, "math": 2}), lenient, strict, ppl=10.0)
    candidate = judge("v1", its, answers({"naming": 9, "math": 3}), lenient, strict, ppl=10.5)
    report = gate(current, candidate, CONFIG)
    assert report.passed, report.reasons
    assert report.candidate["classes"]["naming"]["accept_rate"] == 0.9
    assert "PROMOTE" in report.to_text()


def test_regressing_candidate_is_rejected_with_a_report():
    its = items()
    current = judge("v0", its, answers({"naming": 9, "math": 6}), lenient, strict, ppl=10.0)
    # Much better at naming, but math collapses: overall up, one class down.
    candidate = judge("v1", its, answers({"naming": 10, "math": 2}), lenient, strict, ppl=10.0)
    report = gate(current, candidate, CONFIG)
    assert not report.passed
    assert any("class math regressed" in r for r in report.reasons)
    text = report.to_text()
    assert text.startswith("gate: REJECT v1") and "math" in text
    assert json.loads(json.dumps(report.to_json()))["passed"] is False


def test_forgetting_is_rejected():
    its = items()
    current = judge("v0", its, answers({"naming": 5, "math": 5}), lenient, strict, ppl=10.0)
    candidate = judge("v1", its, answers({"naming": 6, "math": 5}), lenient, strict, ppl=19.0)
    report = gate(current, candidate, CONFIG)
    assert not report.passed
    assert any("perplexity" in r and "forgetting" in r for r in report.reasons)


def test_reward_hacking_candidate_is_rejected():
    its = items()
    current = judge("v0", its, answers({"naming": 5, "math": 5}), lenient, strict, ppl=10.0)
    # The lenient verifier only looks for the answer somewhere in the reply: spraying it
    # passes every item, but the replies are degenerate and fail the strict re-check.
    sprayed = answers({"naming": 10, "math": 10}, style="{0}\n{0}\n{0}\n{0}\n{0}")
    candidate = judge("v1", its, sprayed, lenient, strict, ppl=10.0)
    assert candidate.overall.accept_rate == 1.0 and candidate.overall.strict_rate == 0.0
    report = gate(current, candidate, CONFIG)
    assert not report.passed
    hacking = [r for r in report.reasons if r.startswith("reward hacking")]
    assert len(hacking) == 2  # flagged repetition, and the strict re-check gap
    assert candidate.flag_counts["repetition"] == 20


def test_answers_wrapped_in_extra_text_fail_the_strict_recheck():
    its = items()
    current = judge("v0", its, answers({"naming": 5, "math": 5}), lenient, strict, ppl=10.0)
    wrapped = answers({"naming": 10, "math": 10}, style="Sure! The answer is {} as requested.")
    report = gate(current, judge("v1", its, wrapped, lenient, strict, ppl=10.0), CONFIG)
    assert not report.passed
    assert any("strict re-check" in r for r in report.reasons)


def test_answers_are_generated_once_per_version(micro_model: Path):
    policy = load_policy(micro_model)
    its = items(per_family=2)
    cache: dict[tuple[str, str], str] = {}
    first = answer_items(policy, its, max_new_tokens=4, version="v0", cache=cache)
    assert len(cache) == len(its)
    cache[("v0", next(iter(cache))[1])] = "cached"
    again = answer_items(policy, its, max_new_tokens=4, version="v0", cache=cache)
    assert "cached" in again and len(first) == len(again) == len(its)
