"""A round's agent examples: the frontier's successful agent episodes in the record, as SFT
examples mixed into the round's SFT phase (``LoopConfig.agent_distill``).

Which episodes: those judged once as a whole (``rl_loop.episode_credit.judged_as_whole``: an
agent client's one verdict on its last turn), accepted, complete and every step of which the
frontier served without a broken call (the ``episode_sft`` export with ``sft_route="frontier"``,
``traffic.export.episode_export``); the exporter's time split keeps the latest
``data.eval_fraction`` of them out, as for the chat data. Each assistant turn of an episode is
one example (``rl_loop.agent.distill.row_examples``): the conversation before it with the
offered tools as the prompt, its text and tool calls as the completion. An episode with a step
whose caller denied training is withheld whole, one with a ``redact`` step scrubbed whole
(``traffic.export.consent``). The episode dataset's lineage (every step's row id:
``traffic.export.lineage``) comes back with the examples, for the checkpoint to link.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from rl_loop.agent.distill import distillation_examples
from rl_loop.config import AgentDistillConfig, DataConfig, window_start
from rl_loop.datasets import SftExample
from rl_loop.episode_credit import judged_as_whole
from traffic.export import EpisodeExportConfig, SplitConfig
from traffic.export.episode_export import build_episode_dataset
from traffic.export.lineage import DatasetRef
from traffic.store import InferenceFilter, StoreBackend


class AgentExamples(NamedTuple):
    """A round's agent examples, counts for its report, and the dataset they were taken from
    (None: none was built)."""

    examples: list[SftExample]
    counts: dict[str, int]
    dataset: DatasetRef | None


async def agent_sft_examples(
    store: StoreBackend,
    config: AgentDistillConfig,
    data: DataConfig,
    *,
    local_target: str,
    work_dir: Path,
    until: datetime | None = None,
) -> AgentExamples:
    """At most ``config.max_examples`` agent turns to learn (the newest episodes' first), counts
    for the round's report and the dataset's lineage; read from the episodes recorded
    ``config.window_days`` before ``until`` (or now)."""
    if config.max_examples == 0:
        return AgentExamples([], {}, None)
    since = window_start(until or datetime.now(UTC), config.window_days)
    rows = [row async for row in store.iter_inferences(InferenceFilter(since=since, until=until))]

    def build() -> AgentExamples:
        episodes = judged_as_whole(
            rows, local_target=local_target, frontier_prefix=data.frontier_prefix
        )
        export = EpisodeExportConfig(
            kind="episode_sft",
            out_dir=work_dir,
            sft_route="frontier",
            scrub_pii=data.scrub_pii,
            split=SplitConfig(eval_fraction=data.eval_fraction),
        )
        dataset = build_episode_dataset(episodes, export)
        examples: list[SftExample] = []
        for row in reversed(dataset.train):  # the newest episodes first
            examples += distillation_examples([row])
            if len(examples) >= config.max_examples:
                break
        counts = {
            "agent_episodes": len(episodes),
            "agent_episodes_withheld": sum(dataset.counts.withheld.values()),
            "agent_episodes_train": len(dataset.train),
            "agent_sft": min(len(examples), config.max_examples),
        }
        ref = DatasetRef(lineage=dataset.lineage, config=export.model_dump(mode="json"))
        return AgentExamples(examples[: config.max_examples], counts, ref)

    return await asyncio.to_thread(build)
