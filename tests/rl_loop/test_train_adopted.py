"""A Hugging Face checkpoint adopted through the preset trains end to end: the job CLI runs SFT
and DPO on it (its own tokenizer and chat template, tools included), the candidate names the
adopted version as its parent, and the fp8 export and the hot-swap preflight accept it against
the checkpoint it was trained from (what a replica serving the adopted model would be swapped to).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from rl_loop.train import main
from serving.build import read_version
from serving.checkpoint_preset import HfCheckpointPreset, adopt_hf_checkpoint
from serving.fp8 import export_fp8
from serving.swap_checks import check_compatible
from serving.tokenizer import TokenizerSpec, train_tokenizer
from tests.fixtures.hf_release import save_release

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def _sft_rows() -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for i, name in enumerate(("alpha", "beta", "gamma", "delta")):
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"Where is {name} defined?"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [
                            {
                                "id": f"call_{i}",
                                "type": "function",
                                "function": {
                                    "name": "read_file",
                                    "arguments": json.dumps({"path": f"pkg/{name}.py"}),
                                },
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"call_{i}", "content": f"def {name}(): ..."},
                    {"role": "assistant", "content": f"pkg/{name}.py:1"},
                ],
                "tools": TOOLS,
            }
        )
    return rows


@pytest.fixture(scope="module")
def adopted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tokenizer = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(TokenizerSpec(vocab_size=512, sample_bytes=200_000), tokenizer)
    release = save_release(tmp_path_factory.mktemp("Qwen3-tiny-A0B"), tokenizer)
    return adopt_hf_checkpoint(HfCheckpointPreset(path=release), tmp_path_factory.mktemp("m"))


def test_an_adopted_checkpoint_trains_from_the_cli_and_its_candidate_can_be_swapped_in(
    adopted: Path, tmp_path: Path
) -> None:
    sft = tmp_path / "sft.jsonl"
    sft.write_text("".join(json.dumps(r) + "\n" for r in _sft_rows()))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(
        "".join(
            json.dumps(
                {
                    "prompt": [{"role": "user", "content": f"Name {n}."}],
                    "chosen": [{"role": "assistant", "content": n}],
                    "rejected": [{"role": "assistant", "content": "I cannot tell."}],
                }
            )
            + "\n"
            for n in ("alpha", "beta", "gamma")
        )
    )
    out = tmp_path / "out"
    job = {
        "model": str(adopted),
        "sft_data": str(sft),
        "preference_data": str(pairs),
        "loop": {
            "work_dir": str(out),
            # The test tokenizer (512 byte-level tokens) spells the tools' JSON out long.
            "data": {"max_prompt_tokens": 1500, "max_completion_tokens": 400},
            "rl": {"steps": 0},
            "sft": {"steps": 3, "batch_size": 2, "replay_windows": 0},
            "dpo": {"steps": 2, "batch_size": 3, "min_pairs": 1},
        },
    }
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    assert main(["--config", str(config)]) == 0

    result = json.loads((out / "result.json").read_text())
    assert {k: v["steps"] for k, v in result["phases"].items()} == {"sft": 3, "dpo": 2}
    sft_phase = result["phases"]["sft"]
    assert sft_phase["too_long"] == 0
    assert math.isfinite(sft_phase["first_loss"]) and math.isfinite(sft_phase["last_loss"])
    candidate = Path(result["checkpoint"])
    source = read_version(adopted)
    assert read_version(candidate).parent == source.version_id
    assert read_version(candidate).spec == source.spec

    export = export_fp8(candidate, tmp_path / "fp8", drift_window_count=2)
    assert read_version(export.fp8_dir).parent == read_version(candidate).version_id
    check_compatible(export.dequantized_dir, adopted)  # the hot-swap preflight
    check_compatible(candidate, adopted)
