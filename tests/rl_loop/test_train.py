"""Training a candidate: RL, SFT and DPO in order on TRL + accelerate, from the loop's call or
from the CLI's job file, full or with LoRA adapters merged into the saved checkpoint; and the
reference loop bench-train compares against."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from rl_loop import reference_loop
from rl_loop.config import GateConfig, LoopConfig, SftConfig
from rl_loop.datasets import SftExample, encode_sft
from rl_loop.evaluate import held_out_perplexity
from rl_loop.model_registry import trained_on
from rl_loop.modeling import Encoded, generate, load_policy, save_checkpoint
from rl_loop.rollouts import Rollout
from rl_loop.scoring import label_logprobs, make_batch
from rl_loop.train import (
    PhaseData,
    TrainJob,
    exported_dataset,
    main,
    train_candidate,
    write_rollouts,
)
from serving.build import read_version
from tests.traffic.export import synthetic as syn
from tests.traffic.export.test_episodes import _episodes
from traffic.export import (
    EpisodeExportConfig,
    ExportConfig,
    SplitConfig,
    export_dataset,
    export_episodes,
)

MESSAGES = [
    [{"role": "system", "content": "Answer with the name."}, {"role": "user", "content": q}]
    for q in ("def alpha(x): return x", "def beta(y): return y", "def gamma(z): return z")
]
NAMES = ["alpha", "beta", "gamma"]


def _rollouts(micro_model: Path) -> list[Rollout]:
    policy = load_policy(micro_model)
    out = []
    for g, messages in enumerate(MESSAGES[:2]):
        prompt = policy.encode_prompt(messages)
        completions = generate(policy, [prompt] * 4, max_new_tokens=5, temperature=1.0, seed=g)
        batch = make_batch([Encoded(prompt, c) for c in completions], policy.pad_id, policy.device)
        with torch.no_grad():
            logp = label_logprobs(policy.model, batch)
        for i, c in enumerate(completions):
            engine = tuple(logp[i][batch.mask[i]].tolist())
            out.append(Rollout(prompt, tuple(c), engine, f"g{g}", 0.75 if i % 2 else -0.25))
    return out


def _pairs() -> list[dict[str, object]]:
    return [
        {
            "prompt": m,
            "chosen": [{"role": "assistant", "content": name}],
            "rejected": [{"role": "assistant", "content": "I cannot tell."}],
        }
        for m, name in zip(MESSAGES, NAMES, strict=True)
    ]


def _config(tmp_path: Path, **engine: object) -> LoopConfig:
    return LoopConfig.model_validate(
        {
            "work_dir": tmp_path,
            "rl": {"steps": 2, "batch_size": 4, "lr": 1e-3},
            "sft": {"steps": 4, "batch_size": 3, "replay_windows": 2, "replay_seq_len": 16},
            "dpo": {"steps": 2, "batch_size": 3, "min_pairs": 1},
            "engine": engine,
        }
    )


def test_a_candidate_trains_rl_sft_and_dpo_in_order_and_saves(
    micro_model: Path, tmp_path: Path
) -> None:
    data = PhaseData(
        rollouts=_rollouts(micro_model),
        sft=[SftExample(m, n) for m, n in zip(MESSAGES, NAMES, strict=True)],
        pairs=_pairs(),
    )
    policy = load_policy(micro_model)
    trained, stats = train_candidate(policy, data, _config(tmp_path), tmp_path / "train", 0)
    assert list(stats) == ["rl", "sft", "dpo"]
    assert [s.steps for s in stats.values()] == [2, 4, 2]
    assert math.isfinite(stats["sft"].extra["replay_loss_last"])
    assert stats["sft"].extra["too_long"] == 0
    assert "forward" not in trained.model.__dict__  # no trainer's patch is left behind
    assert trained.source == micro_model

    saved = save_checkpoint(trained, tmp_path / "ckpt", kind="ft", seed=1, metadata={"r": 0})
    version = read_version(saved)
    assert version.version_id.startswith("ft-")
    assert version.parent == read_version(micro_model).version_id
    assert version.probe is not None and version.metadata["r"] == 0
    reloaded = load_policy(saved)
    ppl = held_out_perplexity(reloaded, GateConfig(ppl_windows=2, ppl_seq_len=16))
    assert math.isfinite(ppl) and ppl > 1


def test_the_cli_trains_from_a_job_file(micro_model: Path, tmp_path: Path) -> None:
    rows = [  # exported as `switchyard traffic export --kind sft` writes them
        syn.chat_row(i, m[1]["content"], n, system=m[0]["content"], fb=[syn.feedback("accepted")])
        for i, (m, n) in enumerate(zip(MESSAGES, NAMES, strict=True))
    ]
    split = SplitConfig(eval_fraction=0.0)
    exported = export_dataset(rows, ExportConfig(kind="sft", out_dir=tmp_path / "sft", split=split))
    sft = tmp_path / "sft" / "train.jsonl"
    assert [json.loads(line)["messages"][:2] for line in sft.read_text().splitlines()] == MESSAGES
    rollouts = tmp_path / "rollouts.jsonl"
    write_rollouts(rollouts, _rollouts(micro_model))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps(p) + "\n" for p in _pairs()))
    job = {
        "model": str(micro_model),
        "sft_data": str(sft),
        "preference_data": str(pairs),
        "rollouts": str(rollouts),
        "loop": _config(tmp_path / "out").model_dump(mode="json"),
    }
    TrainJob.model_validate(job)  # the job file's schema
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump(job))
    assert main(["--config", str(config)]) == 0
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["processes"] == 1
    assert {k: v["steps"] for k, v in result["phases"].items()} == {"rl": 2, "sft": 4, "dpo": 2}
    assert read_version(Path(result["checkpoint"])).parent == read_version(micro_model).version_id
    (linked,) = trained_on(Path(result["checkpoint"]))  # the SFT export's lineage
    assert linked.lineage == exported.lineage and linked.location == str(tmp_path / "sft")
    with pytest.raises(ValueError, match="extra"):
        TrainJob.model_validate({**job, "epochs": 3})


def test_a_job_file_exported_with_its_manifest_names_its_dataset(tmp_path: Path) -> None:
    rows = [
        syn.chat_row(i, f"def f{i}(): pass", f"f{i}", fb=[syn.feedback("accepted", i)])
        for i in range(4)
    ]
    manifest = export_dataset(rows, ExportConfig(kind="sft", out_dir=tmp_path / "sft"))
    ref = exported_dataset(tmp_path / "sft" / "train.jsonl")
    assert ref is not None and ref.lineage == manifest.lineage
    assert ref.location == str(tmp_path / "sft") and ref.config["kind"] == "sft"
    episodes = export_episodes(
        _episodes(), EpisodeExportConfig(kind="episode_sft", out_dir=tmp_path / "agent")
    )
    agent = exported_dataset(tmp_path / "agent" / "train.jsonl")
    assert agent is not None and agent.lineage == episodes.lineage
    loose = tmp_path / "loose.jsonl"
    loose.write_text("")
    assert exported_dataset(loose) is None  # no manifest beside it: no lineage to give


def test_lora_trains_adapters_and_merges_them_into_the_checkpoint(
    micro_model: Path, tmp_path: Path
) -> None:
    data = PhaseData(sft=[SftExample(m, n) for m, n in zip(MESSAGES, NAMES, strict=True)])
    config = _config(tmp_path, lora={"r": 4, "alpha": 8, "save_adapters": True})
    before = {k: v.clone() for k, v in load_policy(micro_model).model.state_dict().items()}
    trained, stats = train_candidate(load_policy(micro_model), data, config, tmp_path, 0)
    assert stats["sft"].steps == 4
    after = trained.model.state_dict()
    assert set(after) == set(before)  # merged: a plain model again, no adapter weights
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(".self_attn." in k and k.endswith("proj.weight") for k in changed)
    adapter = tmp_path / "sft" / "adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["r"] == 4
    assert (adapter / "adapter_model.safetensors").exists()


@pytest.mark.requires_gpu
@pytest.mark.slow
@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="vLLM loads LoRA adapters of a MoE model on CUDA GPUs only, not on its CPU backend",
)
def test_vllm_serves_a_lora_adapter_of_the_moe(tmp_path: Path) -> None:
    import asyncio

    import httpx

    from serving.build import ensure_demo_model
    from serving.replica import VllmReplica, find_free_port
    from serving.vllm_config import VllmLaunchConfig
    from tests.fixtures.vllm_fixture import cache_dir

    model = ensure_demo_model(cache_dir())
    data = PhaseData(sft=[SftExample(m, n) for m, n in zip(MESSAGES, NAMES, strict=True)])
    config = _config(tmp_path, lora={"r": 8, "alpha": 16, "save_adapters": True})
    train_candidate(load_policy(model), data, config, tmp_path, 0)
    launch = VllmLaunchConfig(
        model_dir=model,
        cache_dir=cache_dir(),
        port=find_free_port(),
        device="gpu",
        extra_args=(
            "--enable-lora",
            "--max-lora-rank",
            "8",
            "--lora-modules",
            f"names={tmp_path / 'sft' / 'adapter'}",
        ),
    )
    replica = VllmReplica(launch, log_path=tmp_path / "vllm-lora.log")
    replica.start()
    try:
        asyncio.run(replica.wait_ready(600))
        body = {"model": "names", "prompt": "def alpha", "max_tokens": 4}
        response = httpx.post(f"{replica.base_url}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
    finally:
        replica.stop()


def test_the_reference_loop_learns_a_repeated_batch_with_replay(micro_model: Path) -> None:
    from rl_loop.modeling import code_windows

    policy = load_policy(micro_model)
    examples = encode_sft(policy, [SftExample(m, n) for m, n in zip(MESSAGES, NAMES, strict=True)])
    config = SftConfig(steps=25, batch_size=3, lr=5e-3, warmup_steps=2, max_epochs=100)
    replay = code_windows(str(micro_model), "train", 16, 20_000)
    stats = reference_loop.train_sft(policy, examples, config, replay=replay)
    assert stats.steps == 25 and stats.losses[-1] < 0.6 * stats.losses[0]
    assert math.isfinite(stats.extra["replay_loss_last"])
