"""Datasets of one round, built in process by the traffic record's exporters (``traffic.export``).

- SFT: ``kind="sft"`` with the ``explicit`` label policy: accepted answers (frontier answers, so
  this is distillation; the local model's own accepted answers, self-distillation) and the text
  of user edits / demonstrations. Rejected answers never become targets.
- Preference pairs (when the round trains DPO): ``kind="preference_trl"``: an edit or
  demonstration chosen over the model's answer, a better-graded answer over a worse one to the
  same prompt, in TRL's conversational format.
- RL prompts: ``kind="rl_prompts"``: each recorded prompt with its tags (``family``,
  ``task_id``...) and feedback summary; the RL phase samples fresh completions for them and the
  gate uses the eval split as held-out traffic.
Both use the exporter's time split (the latest ``eval_fraction`` of episodes are ``eval``), its
exact dedup and PII scrubbing, and its consent: a row whose caller denied training never enters,
one whose caller asked for redaction enters scrubbed, and ``RoundData.exports`` counts both
(``withheld``, ``redacted``: ``traffic.export.consent``). The exporter hands its records over
in memory (the records a ``switchyard traffic export`` would write as JSONL lines); this module
reads them as typed examples. ``RoundData.datasets`` carries each dataset's lineage (the rows it
was built from, its hashes: ``traffic.export.lineage``) and config, which the checkpoint trained
on them links (``rl_loop.model_registry``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from rl_loop.config import DataConfig
from rl_loop.modeling import Encoded, Policy
from traffic.export import (
    BuildConfig,
    Dataset,
    DatasetConfig,
    DatasetKind,
    DedupConfig,
    ExportCounts,
    SplitConfig,
    dataset_from_store,
)
from traffic.export.lineage import DatasetRef
from traffic.store import InferenceFilter, StoreBackend

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class SftExample:
    """A prompt and the assistant turn to learn: text, or tool calls (with optional text)."""

    prompt: Messages
    answer: str
    tools: list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None


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
    pairs_train: list[dict[str, Any]] = field(default_factory=list)  # TRL preference pairs
    pairs_eval: list[dict[str, Any]] = field(default_factory=list)
    datasets: list[DatasetRef] = field(default_factory=list)  # built in memory, for the lineage

    def counts(self) -> dict[str, int]:
        return {
            "sft_train": len(self.sft_train),
            "sft_eval": len(self.sft_eval),
            "prompts_train": len(self.prompts_train),
            "prompts_eval": len(self.prompts_eval),
            "pairs_train": len(self.pairs_train),
            "pairs_eval": len(self.pairs_eval),
        }

    def withheld_rows(self) -> int:
        """Rows their consent kept out of every dataset (each export read the same rows and
        withheld the same ones, before any builder's choice)."""
        return max((sum(c.withheld.values()) for c in self.exports.values()), default=0)


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


def sft_examples(rows: Sequence[Mapping[str, Any]]) -> list[SftExample]:
    """The exporter's SFT records (OpenAI chat fine-tuning format) as examples; a record whose
    last message is not an assistant turn is left out."""
    out: list[SftExample] = []
    for row in rows:
        messages = row["messages"]
        last = messages[-1]
        answer, calls = last.get("content"), last.get("tool_calls")
        if last["role"] != "assistant" or not (isinstance(answer, str) or calls):
            continue
        text = answer if isinstance(answer, str) else ""
        out.append(SftExample(messages[:-1], text, row.get("tools"), calls or None))
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
    store: StoreBackend,
    config: DataConfig,
    *,
    until: datetime | None = None,
    pairs: bool = False,
) -> RoundData:
    """The SFT and RL-prompt datasets of everything recorded before ``until``, and the
    preference pairs (TRL's conversational format) when ``pairs``."""
    query = InferenceFilter(ok_only=True, until=until)
    kinds: list[DatasetKind] = ["sft", "rl_prompts"]
    if pairs:
        kinds.append("preference_trl")
    built: dict[DatasetKind, Dataset] = {}
    for kind in kinds:
        built[kind] = await dataset_from_store(store, query, _dataset_config(kind, config))
    sft, prompts = built["sft"], built["rl_prompts"]
    exports = {kind: dataset.counts for kind, dataset in built.items()}
    preference = built.get("preference_trl")
    pairs_train = preference.train if preference else []
    pairs_eval = preference.eval if preference else []
    datasets = [
        DatasetRef(lineage=d.lineage, config=_dataset_config(k, config).model_dump(mode="json"))
        for k, d in built.items()
    ]
    return RoundData(
        sft_train=sft_examples(sft.train),
        sft_eval=sft_examples(sft.eval),
        prompts_train=_prompts(prompts.train),
        prompts_eval=_prompts(prompts.eval),
        exports=exports,
        pairs_train=pairs_train,
        pairs_eval=pairs_eval,
        datasets=datasets,
    )


def within_caps(
    policy: Policy, examples: Sequence[SftExample], config: DataConfig
) -> tuple[list[SftExample], int]:
    """The examples whose prompt and answer fit the token caps (a compute budget), and how many
    were left out; a tool-call answer counts its calls' JSON."""
    kept: list[SftExample] = []
    for ex in examples:
        calls = "".join(json.dumps(c) for c in ex.tool_calls or [])
        prompt = policy.encode_prompt(ex.prompt, ex.tools)
        completion = policy.encode_completion(ex.answer + calls)
        if len(prompt) <= config.max_prompt_tokens and len(completion) <= (
            config.max_completion_tokens
        ):
            kept.append(ex)
    return kept, len(examples) - len(kept)


def encode_sft(policy: Policy, examples: Sequence[SftExample]) -> list[Encoded]:
    """Token ids of the text answers (the reference loop's input; tool-call answers are
    rendered by the chat template, which only the TRL trainers use)."""
    return [
        Encoded(policy.encode_prompt(ex.prompt, ex.tools), policy.encode_completion(ex.answer))
        for ex in examples
        if not ex.tool_calls
    ]


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
