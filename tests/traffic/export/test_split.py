"""Time-based split: deterministic, order-independent, episodes never cut in two."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from tests.traffic.export.synthetic import at, uuid7
from traffic.export.config import SplitConfig
from traffic.export.split import (
    EpisodeStarts,
    RowTime,
    assign_splits,
    quantile_cutoff_id,
    record_split,
)


def _rows(n: int, episode_of=lambda i: None) -> list[RowTime]:  # type: ignore[no-untyped-def]
    return [RowTime(uuid7(i), at(i), episode_of(i)) for i in range(n)]


def test_quantile_takes_the_last_rows() -> None:
    rows = _rows(20)
    split = assign_splits(rows, SplitConfig(eval_fraction=0.1))
    assert [split[r.id] for r in rows] == ["train"] * 18 + ["eval"] * 2


@pytest.mark.parametrize(
    ("n", "fraction", "n_eval"), [(10, 0.1, 1), (5, 0.1, 1), (4, 0.1, 0), (3, 0.5, 2), (7, 0.0, 0)]
)
def test_quantile_rounding(n: int, fraction: float, n_eval: int) -> None:
    ids = [uuid7(i) for i in range(n)]
    cutoff = quantile_cutoff_id(ids, fraction)
    assert sum(1 for i in ids if cutoff is not None and i >= cutoff) == n_eval


def test_explicit_cutoff_compares_time() -> None:
    rows = _rows(10)
    split = assign_splits(rows, SplitConfig(cutoff=at(7)))
    assert [split[r.id] for r in rows] == ["train"] * 7 + ["eval"] * 3


def test_episode_belongs_where_its_first_row_falls() -> None:
    # Episode "long" starts at minute 2 and runs past the cutoff: it stays in train.
    rows = _rows(10, lambda i: "long" if i in (2, 8, 9) else None)
    split = assign_splits(rows, SplitConfig(cutoff=at(7)))
    assert split[uuid7(8)] == split[uuid7(9)] == split[uuid7(2)] == "train"
    assert split[uuid7(7)] == "eval"


def test_episode_start_among_rows_not_being_split() -> None:
    # The episode's first row (minute 1) gave no record, but still decides.
    starts = EpisodeStarts()
    for r in _rows(10, lambda i: "e" if i in (1, 9) else None):
        starts.add(r)
    late = [RowTime(uuid7(9), at(9), "e"), RowTime(uuid7(8), at(8), None)]
    split = assign_splits(late, SplitConfig(cutoff=at(5)), starts)
    assert split == {uuid7(9): "train", uuid7(8): "eval"}


def test_no_episode_straddles_and_input_order_is_irrelevant() -> None:
    rng = random.Random(3)
    rows = _rows(300, lambda i: f"ep{rng.randrange(40)}" if i % 3 else None)
    config = SplitConfig(eval_fraction=0.25)
    first = assign_splits(rows, config)
    shuffled = rows[:]
    random.Random(4).shuffle(shuffled)
    assert assign_splits(shuffled, config) == first
    by_episode: dict[str, set[str]] = {}
    for r in rows:
        by_episode.setdefault(r.episode_key, set()).add(first[r.id])
    assert all(len(s) == 1 for s in by_episode.values())
    assert 0 < sum(v == "eval" for v in first.values()) <= 75


def test_record_split_drops_disagreeing_sources() -> None:
    assignment = {"a": "train", "b": "train", "c": "eval"}
    assert record_split(["a", "b"], assignment) == "train"  # type: ignore[arg-type]
    assert record_split(["c"], assignment) == "eval"  # type: ignore[arg-type]
    assert record_split(["a", "c"], assignment) is None  # type: ignore[arg-type]


def test_config_validation() -> None:
    with pytest.raises(ValidationError, match="not both"):
        SplitConfig(eval_fraction=0.2, cutoff=at(1))
    with pytest.raises(ValidationError, match="timezone-aware"):
        SplitConfig(cutoff=datetime(2025, 1, 1))
    with pytest.raises(ValidationError):
        SplitConfig(eval_fraction=1.0)
    with pytest.raises(ValidationError):
        SplitConfig(bogus=1)  # type: ignore[call-arg]
    assert SplitConfig(cutoff=datetime(2025, 1, 1, tzinfo=UTC)).eval_fraction == 0.1
