"""Each builder's exact output shape and its labelling rules."""

from __future__ import annotations

from typing import Any

import pytest

from tests.traffic.export import synthetic as syn
from traffic.export.builders import (
    BuiltRecord,
    PreferenceBuilder,
    example_of,
    make_builder,
    rl_prompt_record,
    sft_record,
)
from traffic.export.config import BuildConfig
from traffic.store import InferenceRow

EXPLICIT = BuildConfig()
FRONTIER = BuildConfig(label_policy="unlabelled_frontier")
USER_Q = [{"role": "user", "content": "What is 2+2?"}]


def _sft(r: InferenceRow, config: BuildConfig = EXPLICIT) -> dict[str, Any] | str:
    result = sft_record(example_of(r, syn.LIVE), config)
    return result if isinstance(result, str) else result.record


def _all(kind: str, rows: list[InferenceRow], config: BuildConfig = EXPLICIT) -> list[BuiltRecord]:
    builder = make_builder(kind, config)  # type: ignore[arg-type]
    out: list[BuiltRecord] = []
    for r in rows:
        out.extend(builder.add(example_of(r, syn.LIVE)))
    return out + builder.finish()


# ---------------------------------------------------------------- SFT


def test_sft_accepted_chat_answer() -> None:
    r = syn.chat_row(1, "What is 2+2?", "4", system="Be terse.", fb=[syn.feedback("accepted")])
    assert _sft(r) == {
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4"},
        ]
    }


def test_sft_with_tools_and_tool_history() -> None:
    record = _sft(syn.chat_tool_row(1, fb=[syn.feedback("accepted")]))
    assert isinstance(record, dict)
    assert list(record) == ["messages", "tools"]
    assert record["tools"] == [syn.WEATHER_TOOL_CHAT]
    assert [m["role"] for m in record["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert record["messages"][-1] == {"role": "assistant", "content": "18C and sunny."}


def test_sft_answer_with_tool_calls_anthropic() -> None:
    record = _sft(syn.anthropic_row(1, fb=[syn.feedback("accepted")]))
    assert isinstance(record, dict)
    assert record["messages"][-1] == {
        "role": "assistant",
        "content": "The assertion is wrong.",
        "tool_calls": [
            {
                "id": "toolu_2",
                "type": "function",
                "function": {
                    "name": "write_file",
                    "arguments": '{"path":"test_a.py","text":"assert 1 == 1"}',
                },
            }
        ],
    }
    assert record["tools"][0]["function"]["name"] == "read_file"


def test_sft_from_responses_and_completions() -> None:
    resp = _sft(syn.responses_row(1, fb=[syn.feedback("accepted")]))
    assert isinstance(resp, dict)
    assert resp["messages"][-1]["tool_calls"][0]["id"] == "fc_2"
    comp = _sft(syn.completions_row(1, "def f():", " pass", fb=[syn.feedback("accepted")]))
    assert comp == {
        "messages": [
            {"role": "user", "content": "def f():"},
            {"role": "assistant", "content": " pass"},
        ]
    }


def test_sft_edited_and_demonstration_text_win() -> None:
    edited = syn.chat_row(
        1, "What is 2+2?", "5", fb=[syn.feedback("rejected"), syn.feedback("edited", 1, text="4")]
    )
    assert _sft(edited) == {"messages": [*USER_Q, {"role": "assistant", "content": "4"}]}
    demo = syn.chat_row(
        1,
        "What is 2+2?",
        None,
        status=500,
        fb=[
            syn.feedback("edited", 1, text="four"),
            syn.feedback("demonstration", 2, text="2+2 = 4"),
        ],
    )
    assert _sft(demo) == {"messages": [*USER_Q, {"role": "assistant", "content": "2+2 = 4"}]}


@pytest.mark.parametrize(
    ("fb", "config", "reason"),
    [
        ([syn.feedback("rejected")], EXPLICIT, "rejected"),
        ([syn.feedback("accepted"), syn.feedback("rejected", 1)], FRONTIER, "rejected"),
        ([syn.feedback("rejected"), syn.feedback("accepted", 1)], EXPLICIT, "rejected"),
        ([], EXPLICIT, "unlabelled"),
        ([syn.feedback("comment")], EXPLICIT, "unlabelled"),
        (
            [syn.feedback("score", value=0.1), syn.feedback("accepted")],
            BuildConfig(min_score=0.5),
            "low_score",
        ),
    ],
)
def test_sft_exclusions(fb: list[Any], config: BuildConfig, reason: str) -> None:
    assert _sft(syn.chat_row(1, "q", "a", fb=fb), config) == reason


def test_sft_label_policy_for_unlabelled_rows() -> None:
    frontier = syn.chat_row(1, "q", "a")
    local = syn.chat_row(1, "q", "a", route_target="local")
    assert _sft(frontier, EXPLICIT) == "unlabelled"
    assert isinstance(_sft(frontier, FRONTIER), dict)
    assert _sft(local, FRONTIER) == "not_frontier"
    assert _sft(syn.chat_row(1, "q", "a", status=503), FRONTIER) == "no_answer"


def test_prompt_must_end_with_user_or_tool() -> None:
    prefill = syn.row(
        1,
        "anthropic.messages",
        {
            "model": "claude",
            "max_tokens": 100,
            "messages": [
                {"role": "user", "content": "Write JSON"},
                {"role": "assistant", "content": "{"},
            ],
        },
        {"content": [{"type": "text", "text": '"a": 1}'}]},
        fb=[syn.feedback("accepted")],
    )
    assert _sft(prefill) == "prompt_ends_with_assistant"
    system_only = syn.row(
        1,
        "openai.chat",
        {"messages": [{"role": "system", "content": "s"}]},
        syn.chat_response("x"),
        fb=[syn.feedback("accepted")],
    )
    assert _sft(system_only) == "no_user_message"


def test_per_row_builder_counts_skips() -> None:
    builder = make_builder("sft", EXPLICIT)
    builder.add(example_of(syn.chat_row(1, "q", "a")))
    builder.add(example_of(syn.chat_row(2, "q", "a", fb=[syn.feedback("rejected")])))
    assert builder.skipped == {"unlabelled": 1, "rejected": 1}
    assert builder.finish() == []


# ---------------------------------------------------------------- preference


def test_edited_row_gives_trl_pair() -> None:
    r = syn.chat_row(1, "What is 2+2?", "5", fb=[syn.feedback("edited", text="4")])
    (pair,) = _all("preference_trl", [r])
    assert pair.record == {
        "prompt": USER_Q,
        "chosen": [{"role": "assistant", "content": "4"}],
        "rejected": [{"role": "assistant", "content": "5"}],
    }
    assert pair.source_ids == (r.inference.id,)


def test_edited_row_gives_openai_dpo_pair_with_tools() -> None:
    r = syn.chat_tool_row(1, fb=[syn.feedback("edited", text="Sunny, 18C.")])
    (pair,) = _all("preference_openai", [r])
    assert list(pair.record) == ["input", "preferred_output", "non_preferred_output"]
    assert pair.record["input"]["tools"] == [syn.WEATHER_TOOL_CHAT]
    assert pair.record["input"]["messages"] == example_of(r, syn.LIVE).prompt
    assert pair.record["preferred_output"] == [{"role": "assistant", "content": "Sunny, 18C."}]
    assert pair.record["non_preferred_output"] == [
        {"role": "assistant", "content": "18C and sunny."}
    ]


def test_cross_row_pair_accepted_over_rejected() -> None:
    good = syn.chat_row(1, "What is 2+2?", "4", seq=1, fb=[syn.feedback("accepted")])
    bad = syn.chat_row(2, "What  is 2+2? ", "22", seq=2, fb=[syn.feedback("rejected")])
    (pair,) = _all("preference_trl", [bad, good])
    assert pair.record["chosen"] == [{"role": "assistant", "content": "4"}]
    assert pair.record["rejected"] == [{"role": "assistant", "content": "22"}]
    assert pair.source_ids == tuple(sorted([good.inference.id, bad.inference.id]))


def test_cross_row_scores_rank_within_a_label() -> None:
    rows = [
        syn.chat_row(i, "q", answer, seq=i, fb=[syn.feedback("score", i, value=score)])
        for i, (answer, score) in enumerate([("mid", 0.5), ("best", 0.9), ("worst", 0.1)])
    ]
    (pair,) = _all("preference_trl", rows)
    assert pair.record["chosen"][0]["content"] == "best"
    assert pair.record["rejected"][0]["content"] == "worst"
    pairs = _all("preference_trl", rows, BuildConfig(max_pairs_per_prompt=5))
    assert [p.record["rejected"][0]["content"] for p in pairs] == ["worst", "mid"]


def test_no_pair_without_a_strict_preference() -> None:
    builder = PreferenceBuilder("preference_trl", EXPLICIT)
    a = syn.chat_row(1, "q", "x", seq=1, fb=[syn.feedback("accepted")])
    b = syn.chat_row(2, "q", "y", seq=2, fb=[syn.feedback("accepted")])
    c = syn.chat_row(3, "other q", "z", seq=3, fb=[syn.feedback("rejected")])
    d = syn.chat_row(4, "q", "w", seq=4)
    for r in (a, b, c, d):
        assert builder.add(example_of(r, syn.LIVE)) == []
    assert builder.finish() == []
    assert builder.skipped == {"no_preference_signal": 1, "unpaired": 3}


def test_identical_answers_never_pair() -> None:
    a = syn.chat_row(1, "q", "same", seq=1, fb=[syn.feedback("accepted")])
    b = syn.chat_row(2, "q", "same ", seq=2, fb=[syn.feedback("rejected")])
    c = syn.chat_row(3, "q", "same", seq=3, fb=[syn.feedback("edited", text="same")])
    assert _all("preference_trl", [a, b, c]) == []


# ---------------------------------------------------------------- RL prompts


def test_rl_prompt_record() -> None:
    r = syn.chat_tool_row(
        1,
        tags={"verifier_id": "pytest", "task_family": "weather", "team": "x"},
        fb=[
            syn.feedback("accepted"),
            syn.feedback("score", 1, value=0.75),
            syn.feedback("comment", 2),
        ],
    )
    result = rl_prompt_record(example_of(r, syn.LIVE), EXPLICIT)
    assert isinstance(result, BuiltRecord)
    assert result.record == {
        "prompt": example_of(r, syn.LIVE).prompt,
        "id": r.inference.id,
        "tags": {"task_family": "weather", "team": "x", "verifier_id": "pytest"},
        "reward_context": {
            "feedback": {
                "accepted": 1,
                "rejected": 0,
                "edited": 0,
                "demonstrations": 0,
                "scores": [0.75],
            },
            "reference_answer": "18C and sunny.",
            "task_family": "weather",
            "verifier_id": "pytest",
        },
        "tools": [syn.WEATHER_TOOL_CHAT],
    }


def test_rl_prompt_reference_answer_rules() -> None:
    def ref(r: InferenceRow) -> Any:
        result = rl_prompt_record(example_of(r, syn.LIVE), EXPLICIT)
        assert isinstance(result, BuiltRecord)
        return result.record["reward_context"].get("reference_answer")

    assert ref(syn.chat_row(1, "q", "a")) is None
    assert ref(syn.chat_row(1, "q", "a", fb=[syn.feedback("rejected")])) is None
    assert ref(syn.chat_row(1, "q", "a", fb=[syn.feedback("demonstration", text="d")])) == "d"
    assert ref(syn.chat_row(1, "q", None, status=500)) is None
    record = rl_prompt_record(example_of(syn.chat_row(1, "q", "a")), EXPLICIT)
    assert isinstance(record, BuiltRecord)
    assert list(record.record) == ["prompt", "id", "tags", "reward_context"]


def test_reserved_reward_tag_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="reserved"):
        BuildConfig(reward_context_tags=("feedback",))


def test_near_text_is_the_last_turn_and_answers() -> None:
    r = syn.chat_tool_row(1, fb=[syn.feedback("accepted")])
    (record,) = _all("sft", [r])
    assert record.near_text == "tool: 18C, sunny\nassistant: 18C and sunny."
    assert "Be brief." in record.exact_text and "get_weather" in record.exact_text
