"""Configuration of a dataset build and export; every default is defined here and only here.

``DatasetConfig`` says how rows become a dataset (built in memory by ``build_dataset``, as the
RL loop does); ``ExportConfig`` adds the files it is written to, and is recorded verbatim in each
export's ``manifest.json``, so a dataset can be rebuilt from the same rows with the same settings.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from traffic.store.records import TrainingUse

DatasetKind = Literal["sft", "preference_trl", "preference_openai", "rl_prompts"]
OutputFormat = Literal["jsonl", "parquet"]
# explicit: only accepted / edited / demonstration rows give SFT targets.
# unlabelled_frontier: also successful answers of frontier routes that got no accept/reject.
LabelPolicy = Literal["explicit", "unlabelled_frontier"]

_RESERVED_REWARD_KEYS = frozenset({"feedback", "reference_answer"})
# Rows recorded before consent was stamped (migration 9) were open to training: they stay so
# unless a build says otherwise (traffic.export.consent).
DEFAULT_UNSTAMPED_TRAINING_USE: TrainingUse = "allow"
UNSTAMPED_DESCRIPTION = (
    "the consent of rows recorded before training_use was stamped (migration 9): allow, "
    "redact or deny; each row's own stamp decides for the rest (traffic.export.consent)"
)


class SplitConfig(BaseModel):
    """Time-based train/eval split. Eval holds the episodes that start at or after the cutoff:
    ``cutoff`` when given, else the time of the row at the ``1 - eval_fraction`` quantile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    eval_fraction: float = Field(default=0.1, ge=0.0, lt=1.0)
    cutoff: datetime | None = None

    @model_validator(mode="after")
    def _one_cutoff(self) -> Self:
        if self.cutoff is not None:
            if self.cutoff.tzinfo is None:
                raise ValueError(
                    "split.cutoff must be timezone-aware (UTC), e.g. 2025-01-01T00:00Z"
                )
            if "eval_fraction" in self.model_fields_set:
                raise ValueError("set either split.cutoff or split.eval_fraction, not both")
        return self


class DedupConfig(BaseModel):
    """Exact dedup on normalized text, then MinHash-LSH near-duplicate removal."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exact: bool = True
    near: bool = True
    threshold: float = Field(default=0.9, gt=0.0, le=1.0, description="Jaccard similarity")
    num_perm: int = Field(default=128, ge=16, le=1024)
    shingle_words: int = Field(default=5, ge=1, le=32)
    seed: int = Field(default=1, ge=0)


class BuildConfig(BaseModel):
    """How rows and their feedback become training records."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label_policy: LabelPolicy = "explicit"
    frontier_route_prefixes: tuple[str, ...] = ("frontier",)
    min_score: float | None = Field(
        default=None, description="rows whose mean score is below this give no SFT target"
    )
    max_pairs_per_prompt: int = Field(default=1, ge=1)
    reward_context_tags: tuple[str, ...] = ("task_family", "verifier_id")

    @field_validator("reward_context_tags")
    @classmethod
    def _no_reserved_tags(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        clash = _RESERVED_REWARD_KEYS.intersection(value)
        if clash:
            raise ValueError(f"reward_context_tags may not use reserved names {sorted(clash)}")
        return value


class DatasetConfig(BaseModel):
    """One dataset: which kind, and how rows are split, deduplicated, built and cleaned."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: DatasetKind
    split: SplitConfig = Field(default_factory=SplitConfig)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    build: BuildConfig = Field(default_factory=BuildConfig)
    scrub_pii: bool = Field(
        default=True, description="scrub rows whose consent is allow (redact rows always are)"
    )
    unstamped_training_use: TrainingUse = Field(
        default=DEFAULT_UNSTAMPED_TRAINING_USE, description=UNSTAMPED_DESCRIPTION
    )


class ExportConfig(DatasetConfig):
    """One export: a dataset written to files, and how its rows were selected."""

    out_dir: Path
    formats: tuple[OutputFormat, ...] = ("jsonl",)
    filters: dict[str, Any] = Field(
        default_factory=dict,
        description="how the rows were selected from the store; recorded in the manifest only",
    )

    @field_validator("formats")
    @classmethod
    def _formats(cls, value: tuple[OutputFormat, ...]) -> tuple[OutputFormat, ...]:
        if not value or len(set(value)) != len(value):
            raise ValueError("formats must name jsonl, parquet or both, each once")
        return value
