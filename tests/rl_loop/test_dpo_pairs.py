"""DPO's pairs come from recorded feedback through the exporter, and its effect on the gate is
measured paired (the same items before and after)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from rl_loop.config import DpoConfig, DpoLossType
from rl_loop.evaluate import EvalItem, judge
from rl_loop.feedback_pairs import RecordedAnswer, answer_rows, export_pairs
from rl_loop.modeling import load_policy
from rl_loop.paired_eval import paired_changes
from rl_loop.trainers.dpo import preference_margins, train_dpo

SYSTEM = {"role": "system", "content": "Answer with one name."}


def _prompt(question: str) -> list[dict[str, Any]]:
    return [SYSTEM, {"role": "user", "content": question}]


def test_sampled_answers_graded_by_the_verifier_pair_an_accepted_one_over_rejected_ones() -> None:
    prompt = _prompt("x = 1 + 2\nWhat is the type of x?")
    answers = [
        RecordedAnswer(prompt, "str", accepted=False),
        RecordedAnswer(prompt, "int", accepted=True),
        RecordedAnswer(prompt, "float", accepted=False),
        RecordedAnswer(prompt, "str", accepted=False),
        RecordedAnswer(prompt, "int", accepted=True),
    ]
    pairs = export_pairs(answers, max_pairs_per_prompt=3)
    assert [p["rejected"][0]["content"] for p in pairs] == ["str", "float"]
    assert all(p["chosen"] == [{"role": "assistant", "content": "int"}] for p in pairs)
    assert all(p["prompt"] == prompt for p in pairs)


def test_a_prompt_whose_samples_all_fail_or_all_pass_gives_no_pair() -> None:
    failing, passing = _prompt("a?"), _prompt("b?")
    answers = [
        RecordedAnswer(failing, "no", accepted=False),
        RecordedAnswer(failing, "nope", accepted=False),
        RecordedAnswer(passing, "yes", accepted=True),
        RecordedAnswer(passing, "yes!", accepted=True),
    ]
    assert export_pairs(answers, max_pairs_per_prompt=4) == []


def test_an_edited_answer_pairs_the_edit_over_the_answer() -> None:
    prompt = _prompt("raise KeyError?")
    pairs = export_pairs([RecordedAnswer(prompt, "ValueError", accepted=False, edit="KeyError")])
    assert pairs == [
        {
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": "KeyError"}],
            "rejected": [{"role": "assistant", "content": "ValueError"}],
        }
    ]


def test_recorded_rows_are_the_same_for_the_same_answers() -> None:
    answers = [RecordedAnswer(_prompt("q"), "a", accepted=True, tags={"family": "f"})]
    first, second = answer_rows(answers), answer_rows(answers)
    assert first[0].inference.id == second[0].inference.id
    assert first[0].inference.route_target == "local"
    assert [f.kind for f in first[0].feedback] == ["accepted"]


def _verify(tags: Any, answer: str) -> tuple[bool, str]:
    return answer == tags["answer"], ""


def test_paired_change_counts_items_gained_and_lost_per_family() -> None:
    items = [
        EvalItem(_prompt(f"q{i}"), {"family": fam, "answer": "ok"}, "heldout")
        for fam in ("a", "b")
        for i in range(10)
    ]
    before = judge("v1", items, ["ok"] * 3 + ["no"] * 7 + ["ok"] * 10, _verify)
    after = judge("v2", items, ["ok"] * 9 + ["no"] + ["ok"] * 9 + ["no"], _verify)
    changes = paired_changes(before, after)
    a, b = changes["a"], changes["b"]
    assert (a.before, a.after, a.gained, a.lost) == (0.3, 0.9, 6, 0)
    assert a.delta == pytest.approx(0.6)
    assert a.ci95[0] > 0 and a.p_value == pytest.approx(2 / 2**6)
    assert (b.gained, b.lost, b.p_value) == (0, 1, 1.0)
    assert b.ci95[0] < 0 < b.ci95[1]
    assert changes["*overall"].n == 20


def test_paired_change_refuses_evaluations_of_different_items() -> None:
    items = [EvalItem(_prompt("q"), {"family": "a", "answer": "ok"}, "heldout")]
    other = [EvalItem(_prompt("q"), {"family": "b", "answer": "ok"}, "heldout")]
    with pytest.raises(ValueError, match="same items"):
        paired_changes(judge("v1", items, ["ok"], _verify), judge("v2", other, ["ok"], _verify))


@pytest.mark.parametrize("loss_type", ["ipo", "apo_zero"])
def test_dpo_on_sampled_answers_graded_by_feedback_widens_their_margin(
    micro_model: Path, tmp_path: Path, loss_type: DpoLossType
) -> None:
    names = ["parse", "load", "dump", "merge", "split", "render", "close", "flush"]
    answers = []
    for i, name in enumerate(names * 2):
        prompt = _prompt(f"def {name}_{i}(x): ...\nWhat is this function's name?")
        answers += [
            RecordedAnswer(prompt, "I cannot tell.", accepted=False),
            RecordedAnswer(prompt, f"{name}_{i}", accepted=True),
        ]
    pairs = export_pairs(answers)
    assert len(pairs) == 16
    policy, reference = load_policy(micro_model), load_policy(micro_model)
    before = preference_margins(policy, pairs)
    config = DpoConfig(
        steps=12, batch_size=4, lr=3e-3, warmup_steps=2, max_epochs=100, loss_type=loss_type
    )
    stats, trainer = train_dpo(policy, reference, pairs, config, output_dir=tmp_path)
    assert trainer is not None and stats.steps == 12
    assert all(math.isfinite(v) for v in stats.losses)
    after = preference_margins(policy, pairs)
    assert sum(after) > sum(before) + len(pairs)
