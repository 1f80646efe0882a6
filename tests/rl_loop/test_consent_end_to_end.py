"""Consent end to end (issue 47). Traffic from three API keys, one per ``training_use``, goes
through a real gateway in front of the frontier simulator into a real SQLite store; every
exporter runs on that store (SFT, both preference formats, RL prompts, both episode kinds; JSONL
and Parquet); then one round of the RL loop (``rl_loop.loop.prepare_candidate``: datasets, agent
examples, rollouts from the micro model on loopback, RL, SFT and DPO, the gate), every batch its
trainers receive captured where transformers' ``Trainer`` takes it, decoded by the tokenizer.

Over mixes drawn by hypothesis (keys, turns, streamed or not, frontier or router, agent turns
with a tool result, named episodes, feedback), no exported record and no training batch holds a
``deny`` key's content or a ``redact`` key's secrets unscrubbed, the other keys' content does
reach them (the test can fail), and every manifest counts the withheld rows (episodes) exactly.
``scrub_pii`` is off throughout: consent must not depend on it. The traffic and its marks:
:mod:`tests.rl_loop.consent_traffic`."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
import transformers
from hypothesis import HealthCheck, example, given, settings

from rl_loop.config import LoopConfig
from rl_loop.evaluate import EvalItem
from rl_loop.loop import RoundResult, Services, prepare_candidate
from rl_loop.modeling import Policy, load_policy
from tests.fixtures.micro_replica import micro_replica
from tests.rl_loop.consent_traffic import (
    ADMIN_TOKEN,
    EVERY_PATH,
    LABELLED,
    Conversation,
    leaks,
    mark,
    mixes,
    record_traffic,
)
from traffic.export import (
    EpisodeExportConfig,
    ExportConfig,
    SplitConfig,
    export_episodes_from_store,
    export_from_store,
)
from traffic.export.config import BuildConfig, DatasetKind
from traffic.export.episode_export import EpisodeKind
from traffic.store import InferenceFilter, StoreConfig, open_store

MARKED = re.compile(r"(?:ALLOW|REDACT)-MARK-\d+")
SCRUBBED_SECRET = "<SECRET_GITHUB_TOKEN_1>"
ROW_KINDS: tuple[DatasetKind, ...] = ("sft", "preference_trl", "preference_openai", "rl_prompts")
EPISODE_KINDS: tuple[EpisodeKind, ...] = ("episode_sft", "episode_rl")
# Held-out probes that the verifier passes and fails by their tag: the served model is partly
# right on their class, so the round samples rollouts (rl_loop.loop.prepare_candidate).
HELDOUT = [
    EvalItem([{"role": "user", "content": "probe"}], {"family": "probe", "expect": e}, "heldout")
    for e in ("pass", "fail")
]


# -- the exporters -----------------------------------------------------------------------------


async def export_everything(url: str, out: Path) -> dict[str, Any]:
    """Every exporter on the store at ``url``, both formats; their manifests by kind."""
    store = open_store(StoreConfig(url=url))
    await store.connect()
    split = SplitConfig(eval_fraction=0.25)
    manifests: dict[str, Any] = {}
    try:
        for kind in ROW_KINDS:
            config = ExportConfig(
                kind=kind,
                out_dir=out / kind,
                formats=("jsonl", "parquet"),
                split=split,
                build=BuildConfig(label_policy="unlabelled_frontier"),
                scrub_pii=False,
            )
            manifests[kind] = await export_from_store(store, InferenceFilter(), config)
        for episode_kind in EPISODE_KINDS:
            episodes = EpisodeExportConfig(
                kind=episode_kind,
                out_dir=out / episode_kind,
                formats=("jsonl", "parquet"),
                split=split,
                scrub_pii=False,
            )
            manifests[episode_kind] = await export_episodes_from_store(
                store, InferenceFilter(), episodes
            )
    finally:
        await store.close()
    return manifests


def exported_text(folder: Path) -> str:
    """Every record of every file in ``folder`` (JSONL and Parquet, both splits) as JSON."""
    records: list[Any] = []
    for path in sorted(folder.glob("*.jsonl")):
        records += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for path in sorted(folder.glob("*.parquet")):
        records += pq.read_table(path).to_pylist()
    assert {p.suffix for p in folder.iterdir()} == {".jsonl", ".parquet", ".json"}
    return json.dumps(records, default=str)


def check_exports(mix: Sequence[Conversation], manifests: dict[str, Any], out: Path) -> None:
    rows = sum(c.requests for c in mix)
    denied = sum(c.requests for c in mix if c.use == "deny")
    redacted = sum(c.requests for c in mix if c.use == "redact")
    episodes = [c for c in mix if c.names_episode]
    consented = {mark(c.use, i) for i, c in enumerate(mix) if c.use != "deny"}
    for kind in (*ROW_KINDS, *EPISODE_KINDS):
        text = exported_text(out / kind)
        assert leaks(text) == [], kind
        assert set(MARKED.findall(text)) <= consented, kind
        on_disk = json.loads((out / kind / "manifest.json").read_text())
        assert on_disk["counts"] == manifests[kind].counts.model_dump(mode="json"), kind
    for kind in ROW_KINDS:
        counts = manifests[kind].counts
        assert counts.rows_read == rows, kind
        assert counts.withheld == ({"deny": denied} if denied else {}), kind
    prompts = manifests["rl_prompts"].counts
    assert prompts.redacted == redacted  # every row gives a prompt: every redact row, scrubbed
    text = exported_text(out / "rl_prompts")
    assert set(MARKED.findall(text)) == consented  # nothing consented was lost on the way
    assert (SCRUBBED_SECRET in text) == (redacted > 0)
    denied_episodes = sum(c.use == "deny" for c in episodes)
    for kind in EPISODE_KINDS:
        counts = manifests[kind].counts
        assert counts.episodes_read == len(episodes), kind
        assert counts.withheld == ({"deny": denied_episodes} if denied_episodes else {}), kind
        assert counts.redacted == sum(c.use == "redact" for c in episodes), kind
    judged = {
        mark(c.use, i)
        for i, c in enumerate(mix)
        if c.names_episode and c.use != "deny" and c.verdict in ("accepted", "rejected")
    }
    assert set(MARKED.findall(exported_text(out / "episode_rl"))) == judged


# -- the round ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """One batch a trainer received: the trainer's class and its token-id tensors."""

    trainer: str
    ids: dict[str, torch.Tensor]


def capture_batches(seen: list[Batch]) -> Callable[..., Any]:
    """``Trainer.training_step`` recording each batch (every trainer of the loop, TRL's SFT and
    DPO and the on-policy one, takes its batches there) before it trains on it."""
    original = transformers.Trainer.training_step

    def training_step(
        self: transformers.Trainer, model: Any, inputs: dict[str, Any], *args: Any, **kw: Any
    ) -> Any:
        ids = {k: v.detach().cpu() for k, v in inputs.items() if k.endswith("input_ids")}
        seen.append(Batch(type(self).__name__, ids))
        return original(self, model, inputs, *args, **kw)

    return training_step


def decoded(batch: Batch, policy: Policy) -> list[str]:
    """Each row of each token-id tensor of ``batch`` as text (special tokens kept), padding
    left out."""
    return [
        str(policy.tokenizer.decode([t for t in row.tolist() if t >= 0 and t != policy.pad_id]))
        for tensor in batch.ids.values()
        for row in tensor
    ]


def verify(tags: Mapping[str, str], text: str) -> tuple[bool, str]:
    """The probes pass or fail by their tag; a sampled answer by a hash of its text (samples
    vary, so a prompt's rewards do, and RL has rows to train on)."""
    if "expect" in tags:
        return tags["expect"] == "pass", ""
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0, "not quite"


def loop_config(work_dir: Path, mix: Sequence[Conversation]) -> LoopConfig:
    """One quick round: one step per phase, each in one batch that holds every example the
    phase can have (a chat SFT example per conversation, an agent one per step; a prompt per
    row, sampled 4 times; a pair per conversation); a tiny gate."""
    rows = sum(c.requests for c in mix)
    return LoopConfig.model_validate(
        {
            "work_dir": work_dir,
            "data": {
                "eval_fraction": 0.0,
                "scrub_pii": False,
                "max_prompt_tokens": 900,
                "max_completion_tokens": 120,
            },
            "rl": {
                "prompts": 100,
                "samples_per_prompt": 4,
                "max_new_tokens": 4,
                "steps": 1,
                "batch_size": 4 * rows,
                "hint_weight": 0.5,  # failed samples come back with their prompt and a hint
            },
            "sft": {
                "steps": 1,
                "batch_size": len(mix) + rows,
                "replay_windows": 0,
                "warmup_steps": 0,
            },
            "dpo": {"steps": 1, "batch_size": len(mix), "min_pairs": 1, "warmup_steps": 0},
            "agent_distill": {"max_examples": 100},
            "gate": {
                "max_new_tokens": 2,
                "record_eval_per_family": 0,
                "ppl_windows": 1,
                "ppl_seq_len": 8,
            },
        }
    )


async def one_round(
    url: str, served: Path, replica_url: str, work_dir: Path, mix: Sequence[Conversation]
) -> RoundResult:
    store = open_store(StoreConfig(url=url))
    await store.connect()
    services = Services(
        store=store,
        replicas=(replica_url,),
        gateway_url="http://127.0.0.1:9",  # the round's steps 1-4 call no gateway
        admin_token=ADMIN_TOKEN,
        state_file=work_dir / "routing.json",
    )
    try:
        candidate = await prepare_candidate(
            1,
            served,
            services,
            loop_config(work_dir, mix),
            verify=verify,
            strict_verify=None,
            heldout=HELDOUT,
        )
    finally:
        await store.close()
    return candidate.result


def check_round(
    mix: Sequence[Conversation], result: RoundResult, batches: Sequence[Batch], served: Policy
) -> None:
    consented = {mark(c.use, i) for i, c in enumerate(mix) if c.use != "deny"}
    texts: dict[str, str] = {}
    for batch in batches:
        assert batch.ids, batch.trainer  # every trainer's batch holds token ids
        rows = decoded(batch, served)
        texts[batch.trainer] = "\n".join([texts.get(batch.trainer, ""), *rows])
    for trainer, text in texts.items():
        assert leaks(text) == [], trainer
        assert set(MARKED.findall(text)) <= consented, trainer
    # Every phase that stepped was seen, and each phase had data to step on.
    trained = {"rl": "OnPolicyTrainer", "sft": "SftTrainer", "dpo": "DpoTrainer"}
    ran = {trained[phase] for phase in trained if getattr(result, phase).get("steps")}
    assert set(texts) == ran
    paired = any(c.use != "deny" and c.verdict in ("edited", "demonstration") for c in mix)
    assert ran == {"OnPolicyTrainer", "SftTrainer", *(["DpoTrainer"] if paired else [])}
    # What consent admits all reached SFT: its one batch held every example.
    learned = {
        mark(c.use, i) for i, c in enumerate(mix) if c.use != "deny" and c.verdict in LABELLED
    }
    assert set(MARKED.findall(texts["SftTrainer"])) == learned
    redact_learned = any(c.use == "redact" and c.verdict in LABELLED for c in mix)
    assert (SCRUBBED_SECRET in texts["SftTrainer"]) == redact_learned
    # The round's counts: rows withheld from its datasets, episodes from its agent examples.
    judged = [
        c
        for c in mix
        if c.names_episode and c.requests > 1 and c.verdict in ("accepted", "rejected")
    ]
    distilled = [c for c in judged if c.use != "deny" and c.frontier and c.verdict == "accepted"]
    assert result.data["withheld_rows"] == sum(c.requests for c in mix if c.use == "deny")
    assert result.data["agent_episodes_withheld"] == sum(c.use == "deny" for c in judged)
    assert result.data["agent_episodes_train"] == len(distilled)


# -- the property ------------------------------------------------------------------------------


def test_no_denied_or_unscrubbed_content_reaches_an_export_or_a_trainer(
    frontier_sim: Any,
    micro_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN)
    batches: list[Batch] = []
    monkeypatch.setattr(transformers.Trainer, "training_step", capture_batches(batches))
    served = load_policy(micro_model)
    rollouts = micro_replica(served)

    @settings(
        max_examples=4,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(mix=mixes())
    @example(mix=EVERY_PATH)
    def check(mix: list[Conversation]) -> None:
        folder = Path(tempfile.mkdtemp(prefix="mix-", dir=tmp_path))
        url = record_traffic(frontier_sim.base_url, mix, folder)
        manifests = asyncio.run(export_everything(url, folder / "exports"))
        check_exports(mix, manifests, folder / "exports")
        batches.clear()
        result = asyncio.run(one_round(url, micro_model, rollouts.url, folder / "round", mix))
        check_round(mix, result, batches, served)

    try:
        check()
    finally:
        rollouts.stop()
