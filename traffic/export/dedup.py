"""Exact and near-duplicate detection for exported records.

Exact duplicates: two texts are equal after Unicode NFC normalization and whitespace collapsing;
the key is a 16-byte BLAKE2b digest of the normalized text.

Near duplicates: the estimated Jaccard similarity of the texts' word-shingle sets is at least
``threshold``. Texts are lowercased and cut into words at whitespace; a shingle is
``shingle_words`` consecutive words (the whole text when it is shorter). MinHash: each word is
hashed with CRC-32, a shingle's 64-bit hash mixes its words' hashes with fixed odd
multipliers, and permutation ``i`` maps a shingle hash ``x`` to ``((a_i * x + b_i) mod 2**64)
>> 32`` (multiply-shift hashing; ``a_i`` odd), with ``a`` and ``b`` drawn from
``numpy.random.default_rng(seed)``. The signature is the per-permutation minimum, so it
depends only on the text and the config (no Python ``hash()``).

LSH banding: the signature is cut into ``bands`` bands of ``rows`` values
(``bands * rows <= num_perm``), chosen to minimize ``0.1 * false-positive + 0.9 *
false-negative`` area of the S-curve ``1 - (1 - s**rows)**bands`` around the threshold (recall
is favoured because every candidate is verified; at 0.9 and 128 permutations: 8 bands of 16).
Texts sharing any band are candidates; a candidate is a duplicate only when the fraction of
equal signature values reaches the threshold. Records are classified in order, and only kept
ones are indexed, so a chain a~b~c never removes c on account of a removed b.
"""

from __future__ import annotations

import hashlib
import unicodedata
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from traffic.export.config import DedupConfig

Signature = npt.NDArray[np.uint32]
Verdict = Literal["unique", "exact", "near"]

_MIX_SEED = 0x9E3779B97F4A7C15  # fixed: shingle hashes must not depend on the permutation seed
_FP_WEIGHT = 0.1  # candidates are verified, so a false positive costs only a comparison
_BLOCK = 4096
_SHIFT = np.uint64(32)  # shingles per matrix block, bounds memory on very long texts


def normalize_text(text: str) -> str:
    """NFC-normalized ``text`` with every whitespace run collapsed to one space, stripped."""
    return " ".join(unicodedata.normalize("NFC", text).split())


def exact_key(text: str) -> bytes:
    """16-byte digest identifying ``text`` up to normalization (see :func:`normalize_text`)."""
    return hashlib.blake2b(normalize_text(text).encode("utf-8"), digest_size=16).digest()


def lsh_bands(threshold: float, num_perm: int) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` whose S-curve best matches
    ``threshold`` (false-positive area weighted 0.1, false-negative area 0.9)."""
    pairs = np.array(
        [(b, r) for b in range(1, num_perm + 1) for r in range(1, num_perm // b + 1)],
        dtype=np.float64,
    )
    grid = np.linspace(0.0, 1.0, 401)
    bands, rows = pairs[:, :1], pairs[:, 1:]
    prob = 1.0 - (1.0 - grid[None, :] ** rows) ** bands
    below, above = grid <= threshold, grid >= threshold
    false_pos = np.trapezoid(prob[:, below], grid[below], axis=1) if below.sum() > 1 else 0.0
    false_neg = np.trapezoid(1.0 - prob[:, above], grid[above], axis=1) if above.sum() > 1 else 0.0
    error = _FP_WEIGHT * false_pos + (1.0 - _FP_WEIGHT) * false_neg
    best = int(np.argmin(error))  # first minimum: fewest bands among equals
    return int(pairs[best, 0]), int(pairs[best, 1])


class MinHasher:
    """MinHash signatures of word shingles; equal configs give equal signatures everywhere."""

    def __init__(self, num_perm: int, shingle_words: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self._a = rng.integers(0, 2**64, size=num_perm, dtype=np.uint64, endpoint=False) | 1
        self._b = rng.integers(0, 2**64, size=num_perm, dtype=np.uint64, endpoint=False)
        mix = np.random.default_rng(_MIX_SEED).integers(
            0, 2**64, size=shingle_words, dtype=np.uint64, endpoint=False
        )
        self._mix = mix | np.uint64(1)
        self.num_perm = num_perm
        self.shingle_words = shingle_words

    def shingle_hashes(self, text: str) -> npt.NDArray[np.uint64]:
        """64-bit hashes of the text's shingles (one per position; repeats are harmless)."""
        tokens = text.lower().split()
        if not tokens:
            return np.zeros(0, dtype=np.uint64)
        ids = np.array(list(map(zlib.crc32, map(str.encode, tokens))), dtype=np.uint64)
        width = min(self.shingle_words, len(ids))
        count = len(ids) - width + 1
        hashes = np.zeros(count, dtype=np.uint64)
        for j in range(width):
            hashes += ids[j : j + count] * self._mix[j]
        return hashes

    def signature(self, text: str) -> Signature:
        """The ``num_perm`` MinHash values of ``text`` (all ``2**32 - 1`` for an empty text)."""
        hashes = self.shingle_hashes(text)
        sig = np.full(self.num_perm, np.iinfo(np.uint32).max, dtype=np.uint64)
        # In-place ufuncs on one buffer: several times faster than the expression form.
        buf = np.empty((min(len(hashes), _BLOCK), self.num_perm), dtype=np.uint64)
        for start in range(0, len(hashes), _BLOCK):
            block = hashes[start : start + _BLOCK]
            out = buf[: len(block)]
            np.multiply(block[:, None], self._a[None, :], out=out)
            np.add(out, self._b[None, :], out=out)
            np.right_shift(out, _SHIFT, out=out)
            np.minimum(sig, out.min(axis=0), out=sig)
        return sig.astype(np.uint32)


class NearDuplicateIndex:
    """LSH index over kept signatures; ask :meth:`check_and_add` in output order.

    Memory per kept record: its signature (one row of a growing matrix) and, per band, a 64-bit
    key in a dict. A band key is a hash of the band's values; two different bands sharing a key
    only add a candidate, which verification then rejects.
    """

    def __init__(self, num_perm: int, threshold: float) -> None:
        self.bands, self.rows = lsh_bands(threshold, num_perm)
        self._threshold = threshold
        self._buckets: list[dict[int, int | list[int]]] = [{} for _ in range(self.bands)]
        self._kept = np.empty((64, num_perm), dtype=np.uint32)
        self._count = 0
        self._mix = np.random.default_rng(_MIX_SEED).integers(
            0, 2**64, size=self.rows, dtype=np.uint64, endpoint=False
        )

    def _keys(self, sig: Signature) -> list[int]:
        bands = sig[: self.bands * self.rows].reshape(self.bands, self.rows).astype(np.uint64)
        keys: list[int] = (bands * self._mix[None, :]).sum(axis=1, dtype=np.uint64).tolist()
        return keys

    def _candidates(self, keys: list[int]) -> set[int]:
        found: set[int] = set()
        for bucket, key in zip(self._buckets, keys, strict=True):
            hit = bucket.get(key)
            if isinstance(hit, int):
                found.add(hit)
            elif hit is not None:
                found.update(hit)
        return found

    def check_and_add(self, sig: Signature) -> bool:
        """True when ``sig`` is a near duplicate of a kept signature; otherwise keep it."""
        keys = self._keys(sig)
        candidates = sorted(self._candidates(keys))
        if candidates:
            similarity = (self._kept[candidates] == sig[None, :]).mean(axis=1)
            if float(similarity.max()) >= self._threshold:
                return True
        index = self._count
        if index == len(self._kept):
            self._kept = np.concatenate([self._kept, np.empty_like(self._kept)])
        self._kept[index] = sig
        self._count += 1
        for bucket, key in zip(self._buckets, keys, strict=True):
            hit = bucket.setdefault(key, index)
            if isinstance(hit, list):
                hit.append(index)
            elif hit != index:
                bucket[key] = [hit, index]
        return False


@dataclass(frozen=True)
class Fingerprint:
    """What deduplication needs of one record: its exact key and (if enabled) its signature."""

    exact: bytes
    signature: Signature | None


class Deduplicator:
    """Stateful classifier: feed fingerprints in output order, get a verdict for each."""

    def __init__(self, config: DedupConfig) -> None:
        self._config = config
        self._hasher = MinHasher(config.num_perm, config.shingle_words, config.seed)
        self._exact_seen: set[bytes] = set()
        self._near = NearDuplicateIndex(config.num_perm, config.threshold)

    def fingerprint(self, exact_text: str, near_text: str) -> Fingerprint:
        """Exact key of ``exact_text`` and, when near dedup is on, signature of ``near_text``."""
        signature = self._hasher.signature(near_text) if self._config.near else None
        return Fingerprint(exact_key(exact_text), signature)

    def classify(self, fingerprint: Fingerprint) -> Verdict:
        """``exact`` or ``near`` when an earlier kept record matches, else ``unique`` (kept)."""
        if self._config.exact:
            if fingerprint.exact in self._exact_seen:
                return "exact"
            self._exact_seen.add(fingerprint.exact)
        if fingerprint.signature is not None and self._near.check_and_add(fingerprint.signature):
            return "near"
        return "unique"


def dedup_texts(texts: Iterable[str], config: DedupConfig) -> list[Verdict]:
    """Verdict for each text in order, using each text for both exact and near matching."""
    dedup = Deduplicator(config)
    return [dedup.classify(dedup.fingerprint(text, text)) for text in texts]
