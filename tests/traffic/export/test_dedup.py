"""Exact and near-duplicate detection."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from traffic.export.config import DedupConfig
from traffic.export.dedup import (
    Deduplicator,
    MinHasher,
    dedup_texts,
    exact_key,
    lsh_bands,
    normalize_text,
)


def _text(seed: int, words: int = 120) -> str:
    rng = random.Random(seed)
    return " ".join(f"w{rng.randrange(3000)}" for _ in range(words))


def _shingles(text: str, k: int = 5) -> set[str]:
    w = text.split()
    return {" ".join(w[i : i + k]) for i in range(len(w) - k + 1)}


def test_normalization_and_exact_key() -> None:
    assert normalize_text("  a \n\t b  ") == "a b"
    assert exact_key("Hello   world\n") == exact_key("Hello world")
    assert exact_key("Hello world") != exact_key("hello world")
    assert len(exact_key("x")) == 16


def test_exact_duplicates_keep_the_first() -> None:
    verdicts = dedup_texts(["a  b c", "x", "a b c", "a b\nc"], DedupConfig())
    assert verdicts == ["unique", "unique", "exact", "exact"]


def test_near_duplicate_above_threshold_is_removed() -> None:
    base = _text(1, 300)
    words = base.split()
    words[150] = "changed"
    near = " ".join(words)
    a, b = _shingles(base), _shingles(near)
    assert len(a & b) / len(a | b) > 0.95
    assert dedup_texts([base, near], DedupConfig()) == ["unique", "near"]


def test_different_texts_are_kept() -> None:
    texts = [_text(seed) for seed in range(200)]
    assert dedup_texts(texts, DedupConfig()) == ["unique"] * 200


def test_half_changed_text_is_not_a_duplicate_at_default_threshold() -> None:
    base = _text(2, 200)
    words = base.split()
    other = " ".join(words[:100] + _text(3, 100).split())
    assert dedup_texts([base, other], DedupConfig()) == ["unique", "unique"]
    assert dedup_texts([base, other], DedupConfig(threshold=0.2)) == ["unique", "near"]


def test_switches() -> None:
    texts = ["same text here", "same text here"]
    assert dedup_texts(texts, DedupConfig(exact=False, near=False)) == ["unique", "unique"]
    assert dedup_texts(texts, DedupConfig(exact=False)) == ["unique", "near"]


def test_chain_is_judged_against_kept_records_only() -> None:
    # a ~ b and b ~ c, but a is not ~ c: removing b must not remove c.
    rng = random.Random(5)
    words = [f"t{rng.randrange(10**6)}" for _ in range(400)]
    x, y = [f"x{i}" for i in range(40)], [f"y{i}" for i in range(40)]
    a, b, c = " ".join(words), " ".join(words[:360] + x), " ".join(words[:320] + y + x)

    def jaccard(p: str, q: str) -> float:
        return len(_shingles(p) & _shingles(q)) / len(_shingles(p) | _shingles(q))

    assert jaccard(a, b) > 0.8 and jaccard(b, c) >= 0.8 and jaccard(a, c) < 0.67
    assert dedup_texts([a, b, c], DedupConfig(threshold=0.72)) == ["unique", "near", "unique"]
    assert dedup_texts([b, c], DedupConfig(threshold=0.72)) == ["unique", "near"]


def test_signatures_are_deterministic_and_seeded() -> None:
    text = _text(9)
    one = MinHasher(64, 5, seed=1).signature(text)
    assert np.array_equal(one, MinHasher(64, 5, seed=1).signature(text))
    assert not np.array_equal(one, MinHasher(64, 5, seed=2).signature(text))
    assert one.dtype == np.uint32 and one.shape == (64,)


def test_short_and_empty_texts() -> None:
    hasher = MinHasher(32, 5, seed=1)
    assert (hasher.signature("") == np.iinfo(np.uint32).max).all()
    assert len(hasher.shingle_hashes("two words")) == 1
    assert dedup_texts(["fix bug", "fix bugs"], DedupConfig()) == ["unique", "unique"]


def test_words_are_lowercased_and_split_at_whitespace() -> None:
    hasher = MinHasher(32, 2, seed=1)
    assert np.array_equal(hasher.signature("Foo  Bar\nbaz"), hasher.signature("foo bar baz"))
    assert not np.array_equal(hasher.signature("foo(bar) baz"), hasher.signature("foo bar baz"))


@pytest.mark.parametrize(("threshold", "bands", "rows"), [(0.9, 8, 16), (0.8, 14, 9)])
def test_lsh_bands(threshold: float, bands: int, rows: int) -> None:
    assert lsh_bands(threshold, 128) == (bands, rows)


def test_recall_and_precision_on_synthetic_pairs() -> None:
    # Unrelated bases share no shingles, so one classifier can judge all pairs in turn.
    rng = random.Random(11)
    dedup = Deduplicator(DedupConfig())
    found = missed = false = 0
    for i in range(300):
        base = _text(1000 + i, rng.randrange(60, 300))
        words = base.split()
        for _ in range(rng.randrange(1, 6)):
            words[rng.randrange(len(words))] = "edit"
        other = " ".join(words)
        a, b = _shingles(base), _shingles(other)
        jaccard = len(a & b) / len(a | b)
        assert dedup.classify(dedup.fingerprint(base, base)) == "unique"
        dup = dedup.classify(dedup.fingerprint(other, other)) == "near"
        if jaccard >= 0.93:
            found += dup
            missed += not dup
        elif jaccard < 0.8:
            false += dup
    assert found >= 30
    assert missed <= 0.1 * (found + missed)
    assert false == 0


def test_fast_enough_for_a_hundred_thousand_rows() -> None:
    # 5k texts of ~100 words; 100k rows is 20x this.
    texts = [_text(seed, 100) for seed in range(5000)]
    dedup = Deduplicator(DedupConfig())
    start = time.perf_counter()
    for text in texts:
        dedup.classify(dedup.fingerprint(text, text))
    assert time.perf_counter() - start < 10.0
