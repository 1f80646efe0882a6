"""Deterministic time-based train/eval split that never cuts an episode in two.

1. Every row belongs to an episode (``episode_id``; a row without one is an episode of its own).
   An episode *starts* at its row with the smallest id (UUIDv7 ids sort by time).
2. The cutoff is either ``SplitConfig.cutoff`` (a UTC time), or the row at the
   ``1 - eval_fraction`` quantile of the rows being split, sorted by id: the last
   ``round(n * eval_fraction)`` rows (half rounds up) begin at the cutoff row.
3. A row goes to eval when its episode's first row is at or after the cutoff (its ``ts`` against
   an explicit time, its id against a quantile row), else to train. So a whole episode lands
   where its first row falls, and an episode that started before the cutoff stays in train even
   if it continued afterwards: eval can be smaller than ``eval_fraction``, never contaminated.
4. A record built from several rows (a preference pair across rows) goes where all its rows go;
   when they disagree it is dropped and counted, since either side would leak the other.

Nothing depends on input order or on the clock, so the same rows always split the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from traffic.export.config import SplitConfig

Split = Literal["train", "eval"]


@dataclass(frozen=True)
class RowTime:
    """The three facts of a row the split needs."""

    id: str
    ts: datetime
    episode_id: str | None

    @property
    def episode_key(self) -> str:
        return self.episode_id if self.episode_id is not None else f"row:{self.id}"


class EpisodeStarts:
    """The first row of every episode among the rows added so far (in any order)."""

    def __init__(self) -> None:
        self._first: dict[str, RowTime] = {}

    def add(self, row: RowTime) -> None:
        current = self._first.get(row.episode_key)
        if current is None or row.id < current.id:
            self._first[row.episode_key] = row

    def start_of(self, row: RowTime) -> RowTime:
        """The episode's first row; ``row`` itself if its episode was never added."""
        current = self._first.get(row.episode_key)
        return row if current is None or row.id < current.id else current


def quantile_cutoff_id(row_ids: Iterable[str], eval_fraction: float) -> str | None:
    """Id of the first row of the last ``round(n * eval_fraction)`` rows by id, ``None`` when
    that is no row at all."""
    ordered = sorted(set(row_ids))
    n_eval = int(len(ordered) * eval_fraction + 0.5)
    return ordered[len(ordered) - n_eval] if n_eval > 0 else None


def assign_splits(
    rows: Sequence[RowTime], config: SplitConfig, starts: EpisodeStarts | None = None
) -> dict[str, Split]:
    """Split of each row in ``rows``, by row id.

    ``starts`` should hold every row read from the store (also those no record came from), so
    that an episode's true first row decides; by default it is built from ``rows`` alone. The
    quantile is taken over ``rows``.
    """
    if starts is None:
        starts = EpisodeStarts()
        for row in rows:
            starts.add(row)
    cutoff_id = None
    if config.cutoff is None:
        cutoff_id = quantile_cutoff_id((row.id for row in rows), config.eval_fraction)
    result: dict[str, Split] = {}
    for row in rows:
        first = starts.start_of(row)
        if config.cutoff is not None:
            is_eval = first.ts >= config.cutoff
        else:
            is_eval = cutoff_id is not None and first.id >= cutoff_id
        result[row.id] = "eval" if is_eval else "train"
    return result


def record_split(source_ids: Iterable[str], assignment: Mapping[str, Split]) -> Split | None:
    """Where a record built from ``source_ids`` goes; ``None`` when its rows disagree."""
    splits = {assignment[row_id] for row_id in source_ids}
    return splits.pop() if len(splits) == 1 else None
