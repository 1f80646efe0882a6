"""SFT on TRL's SFTTrainer, real optimizer steps on a micro Qwen3-MoE: the loss falls on a
repeated batch, only the assistant turn is trained (text or tool calls, tools rendered as the
served model saw them), and code is replayed in the same step."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from rl_loop.config import SftConfig
from rl_loop.datasets import SftExample, sft_examples
from rl_loop.modeling import code_windows, load_policy
from rl_loop.trainers.sft import sft_rows, train_sft

MESSAGES = [
    [{"role": "system", "content": "Answer with the name."}, {"role": "user", "content": q}]
    for q in ("def alpha(x): return x", "def beta(y): return y", "def gamma(z): return z")
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the workspace.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "read_file", "arguments": json.dumps({"path": "a.py"})},
}


def test_sft_on_trl_learns_a_repeated_batch(micro_model: Path, tmp_path: Path) -> None:
    policy = load_policy(micro_model)
    examples = [SftExample(m, a) for m, a in zip(MESSAGES, ["alpha", "beta", "gamma"], strict=True)]
    config = SftConfig(
        steps=25, batch_size=3, lr=5e-3, warmup_steps=2, max_epochs=100, replay_windows=0
    )
    stats, trainer = train_sft(policy, examples, config, output_dir=tmp_path)
    assert trainer is not None and stats.steps == 25 and len(stats.losses) == 25
    assert all(math.isfinite(v) for v in stats.losses)
    assert stats.losses[-1] < 0.6 * stats.losses[0]
    assert not policy.model.training


def test_only_the_assistant_turn_is_trained_with_the_tools_in_the_prompt(
    micro_model: Path, tmp_path: Path
) -> None:
    rows: list[dict[str, Any]] = [
        {"messages": [*MESSAGES[0], {"role": "assistant", "content": "alpha"}]},
        {
            "messages": [
                {"role": "user", "content": "What is in a.py?"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
            ],
            "tools": TOOLS,
        },
    ]
    examples = sft_examples(rows)  # the exporter's SFT records, tool-call answers included
    assert examples[1].tool_calls == [CALL] and examples[1].answer == ""
    assert sft_rows(examples)[1]["tools"] == json.dumps(TOOLS)
    policy = load_policy(micro_model)
    config = SftConfig(steps=1, batch_size=2, replay_windows=0)
    _, trainer = train_sft(policy, examples, config, output_dir=tmp_path)
    assert trainer is not None
    dataset = trainer.train_dataset
    assert isinstance(dataset, Dataset)  # the trainer's tokenized datasets.Dataset
    for i, expected in enumerate(["alpha<|im_end|>", "<tool_call>"]):
        ids, labels = dataset[i]["input_ids"], dataset[i]["labels"]
        trained = [t for t, label in zip(ids, labels, strict=True) if label != -100]
        context = [t for t, label in zip(ids, labels, strict=True) if label == -100]
        assert expected in policy.tokenizer.decode(trained)
        assert ids[-1] == labels[-1] == policy.eos_id  # the turn ends where the server stops
        # the prompt is the served rendering, never trained on
        assert context == list(policy.encode_prompt(examples[i].prompt, examples[i].tools))
    text = policy.tokenizer.decode(dataset[1]["input_ids"])
    assert "<tools>" in text and '"name": "read_file"' in text


def test_sft_replays_code_in_the_same_step(micro_model: Path, tmp_path: Path) -> None:
    policy = load_policy(micro_model)
    examples = [SftExample(MESSAGES[0], "alpha")]
    replay = code_windows(str(micro_model), "train", 16, 20_000)
    assert replay.shape[1] == 17 and len(replay) > 10
    config = SftConfig(steps=4, batch_size=1, replay_windows=2)
    stats, _ = train_sft(policy, examples, config, output_dir=tmp_path, replay=replay)
    assert math.isfinite(stats.extra["replay_loss_first"])
    assert math.isfinite(stats.extra["replay_loss_last"])


def test_the_trainer_takes_the_reference_loops_steps(micro_model: Path, tmp_path: Path) -> None:
    """Same batches, same tokens, same loss, schedule and optimizer: the same losses."""
    from rl_loop import reference_loop
    from rl_loop.datasets import encode_sft

    examples = [
        SftExample(m, a) for m, a in zip(MESSAGES, ["alpha", "beta", "gamma"], strict=True)
    ] * 3
    config = SftConfig(steps=6, batch_size=4, lr=3e-3, warmup_steps=2, replay_windows=0)
    trl_stats, _ = train_sft(load_policy(micro_model), examples, config, output_dir=tmp_path)
    policy = load_policy(micro_model)
    plain = reference_loop.train_sft(policy, encode_sft(policy, examples), config)
    assert trl_stats.extra["tokens"] == plain.extra["tokens"]
    assert trl_stats.losses == pytest.approx(plain.losses, rel=1e-4)
