"""Datasets of one round, built in process by the traffic record's exporters (``traffic.export``).

- SFT: ``kind="sft"`` with the ``explicit`` label policy: accepted answers (frontier answers, so
  this is distillation; the local model's own accepted answers, self-distillation) and the text
  of user edits / demonstrations. Rejected answers never become targets.
- RL prompts: ``kind="rl_prompts"``: each recorded prompt with its tags (``family``,
  ``task_id``...) and feedback summary; the RL phase samples fresh completions for them and the
  gate uses the eval split as held-out traffic.
Both use the exporter's time split (the latest ``eval_fraction`` of episodes are ``eval``), its
exact dedup and PII scrubbing. The exporter hands its records over in memory (the records a
``switchyard traffic export`` would write as JSONL lines); this module reads them as typed
examples.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rl_loop.config import DataConfig
from rl_loop.modeling import Encoded, Policy
from traffic.export import (
    BuildConfig,
    DatasetConfig,
    DatasetKind,
    DedupConfig,
    ExportCounts,
    SplitConfig,
    dataset_from_store,
)
from traffic.store import InferenceFilter, StoreBackend

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SftExample:
    prompt: Messages
    answer: str
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class PromptRecord:
    """A recorded prompt with its tags (RL prompts, held-out traffic)."""

    id: str
    prompt: Messages
    tags: dict[str, str]
    feedback: dict[str, Any]
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True, slots=True)
class RoundData:
    sft_train: list[SftExample]
    sft_eval: list[SftExample]
    prompts_train: list[PromptRecord]
    prompts_eval: list[PromptRecord]
    exports: dict[DatasetKind, ExportCounts]  # what the exporter read, skipped, dropped

    def counts(self) -> dict[str, int]:
        return {
            "sft_train": len(self.sft_train),
            "sft_eval": len(self.sft_eval),
            "prompts_train": len(self.prompts_train),
            "prompts_eval": len(self.prompts_eval),
        }


def _dataset_config(kind: DatasetKind, config: DataConfig) -> DatasetConfig:
    return DatasetConfig(
        kind=kind,
        split=SplitConfig(eval_fraction=config.eval_fraction),
        dedup=DedupConfig(exact=True, near=config.near_dedup),
        build=BuildConfig(
            label_policy="explicit", frontier_route_prefixes=(config.frontier_prefix,)
        ),
        scrub_pii=config.scrub_pii,
    )


def _sft(rows: list[dict[str, Any]]) -> list[SftExample]:
    out: list[SftExample] = []
    for row in rows:
        messages = row["messages"]
        answer = messages[-1].get("content")
        if messages[-1]["role"] != "assistant" or not isinstance(answer, str):
            continue  # tool-call answers are not trained on here
        out.append(SftExample(messages[:-1], answer, row.get("tools")))
    return out


def _prompts(rows: list[dict[str, Any]]) -> list[PromptRecord]:
    return [
        PromptRecord(
            id=row["id"],
            prompt=row["prompt"],
            tags=dict(row.get("tags") or {}),
            feedback=dict((row.get("reward_context") or {}).get("feedback") or {}),
            tools=row.get("tools"),
        )
        for row in rows
    ]


async def build_round_data(
    store: StoreBackend, config: DataConfig, *, until: datetime | None = None
) -> RoundData:
    """The SFT and RL-prompt datasets of everything recorded before ``until``."""
    query = InferenceFilter(ok_only=True, until=until)
    sft = await dataset_from_store(store, query, _dataset_config("sft", config))
    prompts = await dataset_from_store(store, query, _dataset_config("rl_prompts", config))
    return RoundData(
        sft_train=_sft(sft.train),
        sft_eval=_sft(sft.eval),
        prompts_train=_prompts(prompts.train),
        prompts_eval=_prompts(prompts.eval),
        exports={"sft": sft.counts, "rl_prompts": prompts.counts},
    )


def encode_sft(
    policy: Policy, examples: Sequence[SftExample], config: DataConfig
) -> tuple[list[Encoded], int]:
    """Token ids of the examples that fit the length caps, and how many were left out."""
    out: list[Encoded] = []
    for ex in examples:
        prompt = policy.encode_prompt(ex.prompt, ex.tools)
        completion = policy.encode_completion(ex.answer)
        if len(prompt) <= config.max_prompt_tokens and len(completion) <= (
            config.max_completion_tokens
        ):
            out.append(Encoded(prompt, completion))
    return out, len(examples) - len(out)


def pick_rl_prompts(
    records: Sequence[PromptRecord],
    n: int,
    class_rates: Mapping[str, float],
    *,
    class_tag: str = "family",
    seed: int = 0,
) -> list[PromptRecord]:
    """``n`` prompts, favouring classes where the current model sometimes passes and sometimes
    fails (weight ``p(1-p)`` of its accept rate, plus a floor so no class is starved); a class
    never measured counts as p = 0.5. Prompts of classes at 0 or 1 teach RL nothing."""
    if not records:
        return []
    rng = random.Random(seed)
    weights = []
    for r in records:
        p = class_rates.get(r.tags.get(class_tag, "*"), 0.5)
        weights.append(p * (1 - p) + 0.01)
    picked: list[PromptRecord] = []
    pool = list(range(len(records)))
    for _ in range(min(n, len(records))):
        i = rng.choices(range(len(pool)), [weights[j] for j in pool])[0]
        picked.append(records[pool.pop(i)])
    return picked
