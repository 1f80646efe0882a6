"""Episodes as training data: multi-turn tool-calling SFT records and RL episodes, as files.

Two kinds, from episodes rebuilt by :mod:`traffic.export.episodes`:

- ``episode_sft``: TRL's conversational format with tools, one record per accepted episode::

      {"messages": [system, user, {"role": "assistant", "content": ..., "tool_calls": [
          {"id", "type": "function", "function": {"name", "arguments": {...}}}]},
          {"role": "tool", "tool_call_id", "name", "content"}, ..., final assistant],
       "tools": [{"type": "function", "function": {name, description, parameters}}]}

  Tool-call ``arguments`` are JSON objects (what TRL's trainers and chat templates take), and
  each tool message names its tool. Kept: consistent, complete episodes whose verdict is
  ``accepted`` and whose steps all answered; with ``sft_route: frontier`` only those every step
  of which the frontier served (distillation data); with ``allow_invalid_calls: false`` none
  with a broken tool call.
- ``episode_rl``: one record per judged, consistent episode: the starting ``prompt`` (messages
  before the first answer), the whole trajectory ``messages`` (OpenAI chat, arguments as
  recorded text), ``tools``, ``steps`` (per step: inference id, route target and kind, served
  model, policy reason, status, latency, tokens, cost, the answer, the tool results that
  followed, each call's validity), the terminal ``reward`` (1.0 accepted, 0.0 rejected), the
  ``verdict`` and its ``feedback``, and the episode ``summary``.

Episodes skipped are counted by reason. An episode any step of which its consent denies is
withheld whole, and one with a ``redact`` step is scrubbed whole (:mod:`traffic.export.consent`;
both counted). PII is scrubbed from every text (the trajectory, each step's answer and tool
results, the verdict's reason) unless ``scrub_pii`` is off. The split is the exporters' time
split (:mod:`traffic.export.split`) with each episode as one row at its first step, so an
episode is never cut in two. Files: ``train``/``eval`` in JSONL and/or Parquet (the writers of
:mod:`traffic.export.writers`) and ``manifest.json``, with the lineage (every step's row id of
each record kept: :mod:`traffic.export.lineage`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from traffic.export.config import (
    DEFAULT_UNSTAMPED_TRAINING_USE,
    UNSTAMPED_DESCRIPTION,
    OutputFormat,
    SplitConfig,
)
from traffic.export.consent import ConsentTally
from traffic.export.conversation import LegacyTranslator, Message
from traffic.export.episodes import (
    Episode,
    EpisodeStep,
    RouteKinds,
    episode_summary,
    group_episodes,
    rebuild_episode,
    step_view,
)
from traffic.export.lineage import DatasetLineage, record_digest
from traffic.export.pii import CachingScrubber, TextScrub, scrub_messages, scrub_turn
from traffic.export.split import RowTime, Split, assign_splits
from traffic.export.writers import (
    ColumnType,
    FileEntry,
    remove_files,
    serialize,
    write_jsonl,
    write_manifest,
    write_parquet,
)
from traffic.store import InferenceFilter, InferenceRow, StoreBackend, TrainingUse

EpisodeKind = Literal["episode_sft", "episode_rl"]
SPLITS: tuple[Split, ...] = ("train", "eval")
SCHEMA_VERSION = 1

COLUMNS: dict[EpisodeKind, tuple[tuple[str, ColumnType], ...]] = {
    "episode_sft": (("messages", "json_list"), ("tools", "json_list")),
    "episode_rl": (
        ("episode_id", "string"),
        ("prompt", "json_list"),
        ("messages", "json_list"),
        ("tools", "json_list"),
        ("steps", "json_list"),
        ("reward", "json"),
        ("verdict", "string"),
        ("feedback", "string"),
        ("summary", "json"),
    ),
}


class EpisodeExportConfig(BaseModel):
    """One episode export; recorded verbatim in its ``manifest.json``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: EpisodeKind
    out_dir: Path
    formats: tuple[OutputFormat, ...] = ("jsonl",)
    split: SplitConfig = Field(default_factory=SplitConfig)
    scrub_pii: bool = Field(
        default=True, description="scrub episodes whose consent is allow (redact ones always are)"
    )
    unstamped_training_use: TrainingUse = Field(
        default=DEFAULT_UNSTAMPED_TRAINING_USE, description=UNSTAMPED_DESCRIPTION
    )
    sft_route: Literal["any", "frontier"] = Field(
        default="any",
        description="episode_sft: every accepted episode, or only those the frontier served "
        "entirely (distillation)",
    )
    allow_invalid_calls: bool = Field(
        default=False, description="episode_sft: keep accepted episodes with a broken tool call"
    )
    filters: dict[str, Any] = Field(
        default_factory=dict, description="how the rows were selected; recorded in the manifest"
    )

    @field_validator("formats")
    @classmethod
    def _formats(cls, value: tuple[OutputFormat, ...]) -> tuple[OutputFormat, ...]:
        if not value or len(set(value)) != len(value):
            raise ValueError("formats must name jsonl, parquet or both, each once")
        return value


class EpisodeCounts(BaseModel):
    """Episodes in and out; ``withheld`` (by reason) and ``redacted`` count episodes, as
    :class:`~traffic.export.dataset.ExportCounts` counts rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes_read: int
    records_built: int
    skipped: dict[str, int]
    train: int
    eval: int
    withheld: dict[str, int] = Field(default_factory=dict)
    redacted: int = 0


class EpisodeExportManifest(BaseModel):
    """What was exported, how, and the SHA-256 of every file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: int
    kind: EpisodeKind
    created_at: datetime
    config: EpisodeExportConfig
    counts: EpisodeCounts
    pii: dict[str, int]
    files: dict[str, FileEntry]
    versions: dict[str, str]
    lineage: DatasetLineage | None = None  # None: written before lineage was


# ---------------------------------------------------------------- records


def _arguments_object(text: str) -> Any:
    try:
        parsed = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return text
    return parsed if isinstance(parsed, dict) else text


def trl_messages(messages: Sequence[Message]) -> list[Message]:
    """OpenAI chat messages in TRL's tool-calling shape: arguments as objects, tool messages
    naming their tool."""
    names: dict[str, str] = {}
    out: list[Message] = []
    for message in messages:
        copy = dict(message)
        if copy.get("tool_calls"):
            calls = []
            for call in copy["tool_calls"]:
                fn = call["function"]
                names[call["id"]] = fn["name"]
                function = {"name": fn["name"], "arguments": _arguments_object(fn["arguments"])}
                calls.append({"id": call["id"], "type": "function", "function": function})
            copy["tool_calls"] = calls
        if copy["role"] == "tool":
            copy["name"] = names.get(copy.get("tool_call_id", ""), "")
        out.append(copy)
    return out


def sft_episode_record(episode: Episode, config: EpisodeExportConfig) -> dict[str, Any] | str:
    """The episode as one TRL conversational record, or why it gives none."""
    if not episode.consistent:
        return "inconsistent_episode"
    if episode.verdict is None:
        return "no_verdict"
    if episode.verdict != "accepted":
        return "rejected"
    if not episode.complete or not all(s.ok for s in episode.steps):
        return "incomplete_episode"
    if not config.allow_invalid_calls and episode.invalid_calls:
        return "invalid_tool_call"
    if config.sft_route == "frontier" and any(s.route_kind == "local" for s in episode.steps):
        return "not_frontier"
    record: dict[str, Any] = {"messages": trl_messages(episode.messages)}
    if episode.tools:
        record["tools"] = episode.tools
    return record


def rl_episode_record(episode: Episode) -> dict[str, Any] | str:
    """The episode as one RL record (per-step facts and the terminal reward), or why not."""
    if not episode.consistent:
        return "inconsistent_episode"
    if episode.reward is None:
        return "no_verdict"
    first_answer = next(
        (i for i, m in enumerate(episode.messages) if m["role"] == "assistant"),
        len(episode.messages),
    )
    steps = []
    for step in episode.steps:
        view = step_view(step)
        del view["ts"]  # the id carries the time; records must not vary between exports
        steps.append(view)
    return {
        "episode_id": episode.episode_id,
        "prompt": episode.messages[:first_answer],
        "messages": episode.messages,
        "tools": episode.tools,
        "steps": steps,
        "reward": episode.reward,
        "verdict": episode.verdict,
        "feedback": episode.verdict_reason,
        "summary": episode_summary(episode),
    }


def scrub_episode(episode: Episode, scrub: TextScrub) -> tuple[Episode, Counter[str]]:
    """``episode`` with PII scrubbed from its trajectory and each step's answer and results."""
    messages, counts = scrub_messages(episode.messages, scrub)
    steps: list[EpisodeStep] = []
    for step in episode.steps:
        results, found = scrub_messages(step.tool_results, scrub)
        counts.update(found)
        answer = scrub_turn(step.answer, scrub, counts)
        steps.append(dataclasses.replace(step, answer=answer, tool_results=tuple(results)))
    reason = episode.verdict_reason
    if reason is not None:
        reason, found = scrub(reason)
        counts.update(found)
    scrubbed = dataclasses.replace(
        episode, messages=messages, steps=tuple(steps), verdict_reason=reason
    )
    return scrubbed, counts


# ---------------------------------------------------------------- datasets and files


@dataclasses.dataclass(frozen=True, slots=True)
class EpisodeDataset:
    """Each split's records in output order (by each episode's first step), the counts and
    the lineage."""

    kind: EpisodeKind
    train: list[dict[str, Any]]
    eval: list[dict[str, Any]]
    counts: EpisodeCounts
    pii: dict[str, int]
    lineage: DatasetLineage


def build_episode_dataset(
    episodes: Iterable[Episode], config: EpisodeExportConfig
) -> EpisodeDataset:
    """The records of ``config.kind`` from ``episodes``, scrubbed and split."""
    scrubber = CachingScrubber()
    consent = ConsentTally(config.unstamped_training_use)
    pii: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    built: list[tuple[RowTime, dict[str, Any], tuple[str, ...]]] = []
    read = 0
    for episode in sorted(episodes, key=lambda e: e.steps[0].record.id):
        read += 1
        use = consent.admit(step.record.training_use for step in episode.steps)
        if use is None:
            continue
        if use == "redact":
            consent.redacted += 1
        if config.scrub_pii or use == "redact":
            episode, found = scrub_episode(episode, scrubber)
            pii.update(found)
        if config.kind == "episode_sft":
            record = sft_episode_record(episode, config)
        else:
            record = rl_episode_record(episode)
        if isinstance(record, str):
            skipped[record] += 1
            continue
        first = episode.steps[0].record
        steps = tuple(step.record.id for step in episode.steps)
        built.append((RowTime(first.id, first.ts, episode.episode_id), record, steps))
    assignment = assign_splits([t for t, _, _ in built], config.split)
    parts: dict[Split, list[dict[str, Any]]] = {"train": [], "eval": []}
    sources: dict[Split, list[tuple[tuple[str, ...], bytes]]] = {"train": [], "eval": []}
    for row_time, record, steps in built:
        parts[assignment[row_time.id]].append(record)
        sources[assignment[row_time.id]].append((steps, record_digest(serialize(record))))
    counts = EpisodeCounts(
        episodes_read=read,
        records_built=len(built),
        skipped=dict(sorted(skipped.items())),
        train=len(parts["train"]),
        eval=len(parts["eval"]),
        withheld=consent.counts(),
        redacted=consent.redacted,
    )
    pii_counts = dict(sorted(pii.items()))
    lineage = DatasetLineage.of(config.kind, sources)
    return EpisodeDataset(config.kind, parts["train"], parts["eval"], counts, pii_counts, lineage)


def export_episodes(
    episodes: Iterable[Episode], config: EpisodeExportConfig
) -> EpisodeExportManifest:
    """Write the dataset ``config.kind`` of ``episodes`` into ``config.out_dir``."""
    dataset = build_episode_dataset(episodes, config)
    out = config.out_dir
    out.mkdir(parents=True, exist_ok=True)
    wanted = {f"{s}.{f}" for s in SPLITS for f in config.formats}
    remove_files(out, sorted({f"{s}.{f}" for s in SPLITS for f in ("jsonl", "parquet")} - wanted))
    files: dict[str, FileEntry] = {}
    for split in SPLITS:
        records = dataset.train if split == "train" else dataset.eval
        if "jsonl" in config.formats:
            entry = write_jsonl(out / f"{split}.jsonl", (serialize(r) for r in records))
            files[entry.path] = entry
        if "parquet" in config.formats:
            columns = [
                (name, kind)
                for name, kind in COLUMNS[config.kind]
                if name != "tools" or any("tools" in r for r in records)
            ]
            entry = write_parquet(out / f"{split}.parquet", records, columns)
            files[entry.path] = entry
    manifest = EpisodeExportManifest(
        schema_version=SCHEMA_VERSION,
        kind=config.kind,
        created_at=datetime.now(UTC),
        config=config,
        counts=dataset.counts,
        pii=dataset.pii,
        files=dict(sorted(files.items())),
        versions={"pyarrow": importlib.metadata.version("pyarrow"), "orjson": orjson.__version__},
        lineage=dataset.lineage,
    )
    write_manifest(out / "manifest.json", manifest)
    return manifest


# ---------------------------------------------------------------- from the store


async def _rows(backend: StoreBackend, query: InferenceFilter) -> list[InferenceRow]:
    return [row async for row in backend.iter_inferences(query)]


async def load_episode(
    backend: StoreBackend,
    episode_id: str,
    *,
    legacy: LegacyTranslator | None = None,
    routes: RouteKinds | None = None,
) -> Episode | None:
    """The episode ``episode_id`` rebuilt from the store; None when it has no inference."""
    rows = await _rows(backend, InferenceFilter(episode_id=episode_id))
    if not rows:
        return None
    return await asyncio.to_thread(rebuild_episode, rows, legacy=legacy, routes=routes)


async def episodes_from_store(
    backend: StoreBackend,
    query: InferenceFilter,
    *,
    legacy: LegacyTranslator | None = None,
    routes: RouteKinds | None = None,
) -> list[Episode]:
    """Every episode with a row ``query`` selects, each rebuilt from all its rows."""
    selected = await _rows(backend, query)
    ids = sorted({r.inference.episode_id for r in selected if r.inference.episode_id})
    rows: list[InferenceRow] = []
    for episode_id in ids:
        rows.extend(await _rows(backend, InferenceFilter(episode_id=episode_id)))
    return await asyncio.to_thread(group_episodes, rows, legacy=legacy, routes=routes)


async def export_episodes_from_store(
    backend: StoreBackend,
    query: InferenceFilter,
    config: EpisodeExportConfig,
    *,
    filters: dict[str, Any] | None = None,
    legacy: LegacyTranslator | None = None,
    routes: RouteKinds | None = None,
) -> EpisodeExportManifest:
    """Export the episodes ``query`` touches as ``config`` says (``filters`` go into the
    manifest)."""
    episodes = await episodes_from_store(backend, query, legacy=legacy, routes=routes)
    if filters is not None:
        config = config.model_copy(update={"filters": filters})
    return await asyncio.to_thread(export_episodes, episodes, config)
