"""The tokenizer: trained from local sources, round-trips code, renders ChatML with tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving.tokenizer import (
    ENDOFTEXT,
    IM_END,
    IM_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TokenizerSpec,
    load_tokenizer,
    stdlib_sources,
    train_tokenizer,
    training_sample,
)

SMALL_SPEC = TokenizerSpec(vocab_size=1024, sample_bytes=300_000)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(SMALL_SPEC, out)
    return out


def test_training_sample_is_deterministic_and_bounded() -> None:
    first = training_sample(SMALL_SPEC)
    assert first == training_sample(SMALL_SPEC)
    assert sum(len(text.encode()) for text in first) <= SMALL_SPEC.sample_bytes + 4 * len(first)
    assert len(first) > 5
    other_seed = training_sample(SMALL_SPEC.model_copy(update={"sample_seed": 1}))
    assert other_seed != first


def test_saved_files_hold_the_chat_template_and_token_roles(tokenizer_dir: Path) -> None:
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    assert (tokenizer_dir / "tokenizer.json").exists()
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert "<tools>" in config["chat_template"]
    assert config["eos_token"] == IM_END
    assert config["pad_token"] == ENDOFTEXT


def test_reserved_tokens_have_fixed_ids(tokenizer_dir: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    ids = tokenizer.convert_tokens_to_ids([ENDOFTEXT, IM_START, IM_END, TOOL_CALL_START])
    assert ids == [0, 1, 2, 3]
    assert tokenizer.convert_tokens_to_ids(TOOL_CALL_END) == 4
    assert tokenizer.eos_token_id == 2
    assert tokenizer.pad_token_id == 0
    assert len(tokenizer) == SMALL_SPEC.vocab_size


def test_round_trips_python_source_exactly(tokenizer_dir: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    source = stdlib_sources()[0].read_text(encoding="utf-8")[:5000]
    tricky = 'def f(x: int) -> str:\n\treturn f"{x!r} → ünïcode 😀"  # trailing  \r\n\n'
    for text in (source, tricky):
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert tokenizer.decode(ids) == text
    # BPE learned something: code compresses well below one token per byte.
    assert len(tokenizer.encode(source)) < len(source.encode()) / 2


def test_tool_tags_survive_skip_special_tokens_but_control_tokens_do_not(
    tokenizer_dir: Path,
) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    text = f'{IM_START}assistant\n{TOOL_CALL_START}{{"name": "f"}}{TOOL_CALL_END}{IM_END}'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids[0] == 1 and 3 in ids and 4 in ids and ids[-1] == 2
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == f'assistant\n{TOOL_CALL_START}{{"name": "f"}}{TOOL_CALL_END}'


def test_chat_template_renders_chatml_with_generation_prompt(tokenizer_dir: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
    ]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\nhello<|im_end|>\n"
        "<|im_start|>user\nagain<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    without = tokenizer.apply_chat_template(messages, tokenize=False)
    assert without == rendered.removesuffix("<|im_start|>assistant\n")


def test_chat_template_renders_tools_hermes_style(tokenizer_dir: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Rome"}},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "tool", "tool_call_id": "c2", "content": "24C"},
    ]
    rendered = tokenizer.apply_chat_template(
        messages,  # type: ignore[arg-type]
        tools=[WEATHER_TOOL],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert isinstance(rendered, str)
    system, rest = rendered.split("<|im_end|>\n", 1)
    assert system.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools")
    tools_block = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert json.loads(tools_block) == WEATHER_TOOL
    assert rest == (
        "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
        "<|im_start|>assistant\n"
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n"
        "<tool_response>\n24C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_unknown_spec_keys_are_rejected() -> None:
    with pytest.raises(ValueError, match="extra"):
        TokenizerSpec.model_validate({"vocab_size": 1024, "vocab": 3})
