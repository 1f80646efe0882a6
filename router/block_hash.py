"""Prompt tokens -> chained block hashes, bit for bit as vLLM's prefix cache computes them.

How vLLM (v1, ``vllm/v1/core/kv_cache_utils.py``) names a cached KV block:

- The prompt's token ids are cut into full blocks of ``block_size`` tokens; a trailing partial
  block is never cached, so it is never hashed.
- Block ``i`` is named ``H(parent_i, tuple(tokens_i), extra_keys_i)`` with ``parent_0 =
  NONE_HASH`` and ``parent_i`` = the hash of block ``i - 1``: a hash names the whole prefix
  ending at that block, so "the longest cached prefix" is "the longest run of leading hashes
  found in the cache".
- ``H`` is ``--prefix-caching-hash-algo``: ``sha256`` (default; SHA-256 of the pickled tuple) or
  ``sha256_cbor`` (SHA-256 of the canonical CBOR encoding; reproducible outside Python). We
  launch vLLM with ``sha256_cbor`` (:data:`DEFAULT_HASH_ALGO`) and encode the CBOR ourselves:
  the value is always ``[bytes(32), [uint, ...], null]``, so a fixed byte layout suffices and
  costs a quarter of what the generic ``cbor2`` encoder does. ``xxhash`` variants are refused:
  vLLM seeds them with per-process random bytes, so nobody else can reproduce them.
- ``NONE_HASH = H(seed)`` where ``seed`` is ``$PYTHONHASHSEED`` of the vLLM process if set, else
  the constant ``"vllm-none-hash"`` (:data:`DEFAULT_NONE_HASH_SEED`). A replica started with
  ``PYTHONHASHSEED`` set needs the same value as ``none_hash_seed`` here.
- ``extra_keys`` is ``None`` for plain text requests. Requests with LoRA adapters, multimodal
  inputs, prompt embeddings or a ``cache_salt`` hash differently; for them our hashes simply
  match nothing (the selector then scores on load alone), they are never wrong.
- KV cache events carry a block hash as the integer of its last 8 bytes (big endian;
  ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, vLLM's default). :func:`block_key` gives that same
  integer; prefix indexes store only it (8 bytes of entropy is plenty to tell cached prefixes
  apart, and a 64-bit int is a third of the memory of the 32-byte digest).

Hashing costs about 4 us per block in CPython. Conversations and shared repository contexts
repeat blocks, so :class:`BlockHasher` memoises ``(parent, block tokens) -> hash`` in a bounded
two-generation table: a repeated block costs one dict lookup.
"""

from __future__ import annotations

import hashlib
import pickle
from array import array
from collections.abc import Sequence
from typing import Literal

HashAlgo = Literal["sha256", "sha256_cbor"]
DEFAULT_HASH_ALGO: HashAlgo = "sha256_cbor"
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
DEFAULT_MEMO_BLOCKS = 32_768

_KEY_BYTES = 8
_CBOR_NULL = b"\xf6"


def _cbor_head(major: int, n: int) -> bytes:
    """CBOR initial byte(s) for major type ``major`` (already shifted) and argument ``n``."""
    if n < 24:
        return bytes((major | n,))
    if n < 0x100:
        return bytes((major | 24, n))
    if n < 0x10000:
        return bytes((major | 25,)) + n.to_bytes(2, "big")
    if n < 0x1_0000_0000:
        return bytes((major | 26,)) + n.to_bytes(4, "big")
    return bytes((major | 27,)) + n.to_bytes(8, "big")


def _cbor_int(n: int) -> bytes:
    return _cbor_head(0x00, n) if n >= 0 else _cbor_head(0x20, -1 - n)


def _cbor_text(s: str) -> bytes:
    raw = s.encode()
    return _cbor_head(0x60, len(raw)) + raw


def block_key(block_hash: bytes | int) -> int:
    """The 64-bit integer vLLM publishes in KV events for this block hash."""
    if isinstance(block_hash, int):
        return block_hash & 0xFFFF_FFFF_FFFF_FFFF
    return int.from_bytes(block_hash[-_KEY_BYTES:], "big")


class BlockHasher:
    """Chained block hashes of token sequences for one (block size, algo, seed) setting.

    Holds a bounded memo (at most ``memo_blocks`` entries); no other state. Not thread-safe
    (the memo is a plain dict): use one per event loop.
    """

    def __init__(
        self,
        block_size: int,
        algo: HashAlgo = DEFAULT_HASH_ALGO,
        none_hash_seed: str = DEFAULT_NONE_HASH_SEED,
        memo_blocks: int = DEFAULT_MEMO_BLOCKS,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if algo not in ("sha256", "sha256_cbor"):
            raise ValueError(
                f"hash algo `{algo}` is not reproducible outside vLLM; use sha256_cbor or sha256"
            )
        self.block_size = block_size
        self.algo: HashAlgo = algo
        self.none_hash_seed = none_hash_seed
        self._memo_half = max(1, memo_blocks // 2)
        self._memo: dict[int, bytes] = {}
        self._memo_old: dict[int, bytes] = {}
        self._token_cbor: dict[int, bytes] = {}
        self._cbor_block_head = b"\x83\x58\x20"  # array(3), bytes(32): the parent hash
        self._cbor_tokens_head = _cbor_head(0x80, block_size)
        if algo == "sha256_cbor":
            self.none_hash = hashlib.sha256(_cbor_text(none_hash_seed)).digest()
        else:
            self.none_hash = hashlib.sha256(
                pickle.dumps(none_hash_seed, protocol=pickle.HIGHEST_PROTOCOL)
            ).digest()

    def hash_block(self, parent: bytes | None, tokens: Sequence[int]) -> bytes:
        """vLLM's ``hash_block_tokens(H, parent, tokens, None)``; ``None`` parent = NONE_HASH."""
        parent_hash = parent if parent else self.none_hash
        if self.algo == "sha256":
            payload = pickle.dumps(
                (parent_hash, tuple(tokens), None), protocol=pickle.HIGHEST_PROTOCOL
            )
            return hashlib.sha256(payload).digest()
        if len(parent_hash) != 32:
            raise ValueError("sha256_cbor parents are 32-byte digests")
        enc = self._token_cbor
        try:
            encoded = b"".join(map(enc.__getitem__, tokens))
        except KeyError:
            for t in tokens:
                if t not in enc:
                    enc[t] = _cbor_int(t)
            encoded = b"".join(map(enc.__getitem__, tokens))
        head = (
            self._cbor_tokens_head
            if len(tokens) == self.block_size
            else _cbor_head(0x80, len(tokens))
        )
        body = b"".join((self._cbor_block_head, parent_hash, head, encoded, _CBOR_NULL))
        return hashlib.sha256(body).digest()

    def _hash_blocks(self, token_ids: Sequence[int]) -> list[bytes]:
        bs = self.block_size
        n_blocks = len(token_ids) // bs
        if n_blocks == 0:
            return []
        # One C-level copy of the prompt; a memo key is hash((parent digest, block bytes)):
        # 64 bits, so a collision (about 2**-64 per pair) could only misroute, never corrupt.
        try:
            raw = array("I", token_ids[: n_blocks * bs]).tobytes()
            width = 4 * bs
        except OverflowError:  # ids of 2**32 and above: no tokenizer has them, but be exact
            raw = array("Q", token_ids[: n_blocks * bs]).tobytes()
            width = 8 * bs
        out: list[bytes] = []
        parent = self.none_hash
        memo, old = self._memo, self._memo_old
        for i in range(n_blocks):
            key = hash((parent, raw[i * width : (i + 1) * width]))
            digest = memo.get(key)
            if digest is None:
                digest = old.get(key)
                if digest is None:
                    digest = self.hash_block(parent, token_ids[i * bs : (i + 1) * bs])
                memo[key] = digest
                if len(memo) >= self._memo_half:
                    self._memo_old = old = memo
                    self._memo = memo = {}
            out.append(digest)
            parent = digest
        return out

    def block_hashes(self, token_ids: Sequence[int]) -> list[bytes]:
        """The hashes of every full block of ``token_ids``, first block first."""
        return self._hash_blocks(token_ids)

    def block_keys(self, token_ids: Sequence[int]) -> list[int]:
        """:func:`block_key` of every full block of ``token_ids``, first block first."""
        return [int.from_bytes(h[-_KEY_BYTES:], "big") for h in self._hash_blocks(token_ids)]

    def memo_entries(self) -> int:
        """Entries held by the memo now (at most ``memo_blocks``)."""
        return len(self._memo) + len(self._memo_old)
