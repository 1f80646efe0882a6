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

SHA-256 over every block of every prompt would dominate a decision's cost (docs/kv_routing.md,
"What a decision costs"). Conversations and shared repository contexts repeat blocks, so
:class:`BlockHasher` memoises ``prefix -> (key, hash)`` in a bounded two-generation table, and
finds a prompt's memoised blocks without a Python step per block (the prompt is packed and split
into blocks by ``struct``, each prefix named by a keyed 64-bit print, looked up by ``map``):
only new blocks pay for SHA-256. Given a session, it also remembers the
session's last prompt (its keys and a keyed 64-bit hash of its packed bytes): a next turn that
starts with it reuses its keys after hashing those bytes once, not block by block.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from collections.abc import Sequence
from itertools import accumulate, count
from operator import itemgetter, xor
from typing import Literal, NamedTuple, cast

HashAlgo = Literal["sha256", "sha256_cbor"]
DEFAULT_HASH_ALGO: HashAlgo = "sha256_cbor"
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
DEFAULT_MEMO_BLOCKS = 32_768

_KEY_BYTES = 8
_CBOR_NULL = b"\xf6"
_LAYOUTS = 64  # memoised prompt shapes (block counts)
_KEY = itemgetter(0)
_DIGEST = itemgetter(1)


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


class _LastPrompt(NamedTuple):
    """A session's last prompt, as far as the next one needs it."""

    blocks: int  # full blocks
    width: int  # bytes per block in the packed prompt
    fingerprint: int  # hash() of the packed blocks
    pairs: list[tuple[int, bytes]]  # (key, digest) per block
    print: int  # memo key of the last block


def block_key(block_hash: bytes | int) -> int:
    """The 64-bit integer vLLM publishes in KV events for this block hash."""
    if isinstance(block_hash, int):
        return block_hash & 0xFFFF_FFFF_FFFF_FFFF
    return int.from_bytes(block_hash[-_KEY_BYTES:], "big")


class BlockHasher:
    """Chained block hashes of token sequences for one (block size, algo, seed) setting.

    Holds a bounded memo (at most ``memo_blocks`` entries) and each recent session's last
    prompt (at most ``memo_blocks`` block keys in all); no other state. Not thread-safe
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
        # prefix print -> (key, digest); two generations: the old one is dropped when the
        # new one fills (what a block still in use needs is moved to the new one).
        self._memo: dict[int, tuple[int, bytes]] = {}
        self._memo_old: dict[int, tuple[int, bytes]] = {}
        self._layouts: dict[tuple[int, bool], tuple[struct.Struct, struct.Struct]] = {}
        self._sessions: dict[str, _LastPrompt] = {}
        self._sessions_old: dict[str, _LastPrompt] = {}
        self._session_blocks = 0
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

    def _layout(self, n_blocks: int, wide: bool) -> tuple[struct.Struct, struct.Struct]:
        """Structs that pack ``n_blocks`` blocks of token ids into one buffer and split it into
        per-block bytes (4-byte ids, or 8-byte with ``wide``); memoised per shape, bounded."""
        shape = (n_blocks, wide)
        got = self._layouts.get(shape)
        if got is None:
            if len(self._layouts) >= _LAYOUTS:
                self._layouts.clear()
            code, width = ("Q", 8) if wide else ("I", 4)
            got = self._layouts[shape] = (
                struct.Struct(f"<{n_blocks * self.block_size}{code}"),
                struct.Struct(f"{width * self.block_size}s" * n_blocks),
            )
        return got

    def _memoised(
        self, token_ids: Sequence[int], session: str | None = None
    ) -> list[tuple[int, bytes]]:
        """(key, digest) of every full block, first block first."""
        bs = self.block_size
        n_blocks = len(token_ids) // bs
        if n_blocks == 0:
            return []
        ids = token_ids if len(token_ids) == n_blocks * bs else token_ids[: n_blocks * bs]
        try:
            pack, split = self._layout(n_blocks, wide=False)
            raw = pack.pack(*ids)
        except struct.error:  # ids of 2**32 and above: no tokenizer has them, but be exact
            pack, split = self._layout(n_blocks, wide=True)
            raw = pack.pack(*ids)
        width = len(raw) // n_blocks
        # A session's prompt usually starts with its previous prompt: checked with one keyed
        # 64-bit hash of those bytes, its blocks are reused without a step per block.
        start, head, parent, acc = 0, [], self.none_hash, 0
        last = self._last_prompt(session) if session is not None else None
        if (
            last is not None
            and last.width == width
            and last.blocks <= n_blocks
            and hash(memoryview(raw)[: last.blocks * width]) == last.fingerprint
        ):
            start, head, parent, acc = last.blocks, last.pairs, last.pairs[-1][1], last.print
        # The memo key of block i names the whole prefix ending there: the XOR of Python's
        # (per-process keyed) hashes of (position, block bytes) up to i. Distinct prefixes
        # collide with probability about 2**-64 (a collision could only misroute, never
        # corrupt), and the whole walk runs at C speed: no Python step per repeated block.
        blocks = split.unpack(raw)
        prints = list(accumulate(map(hash, zip(count(start), blocks[start:])), xor, initial=acc))
        del prints[0]
        memo = self._memo
        tail: list[tuple[int, bytes] | None] = list(map(memo.get, prints))
        if None in tail:
            first = tail.index(None)
            if first:
                parent = tail[first - 1][1]  # type: ignore[index]
            for i in range(first, len(tail)):
                got = tail[i]
                if got is None:
                    got = self._memo_old.get(prints[i])
                    if got is None:
                        block = start + i
                        digest = self.hash_block(parent, ids[block * bs : (block + 1) * bs])
                        got = (int.from_bytes(digest[-_KEY_BYTES:], "big"), digest)
                    memo[prints[i]] = tail[i] = got
                    if len(memo) >= self._memo_half:
                        self._memo_old, self._memo = memo, {}
                        memo = self._memo
                parent = got[1]
        done = cast(list[tuple[int, bytes]], tail)  # every None was filled in
        out = head + done if head else done
        if session is not None:
            self._remember_prompt(
                session, _LastPrompt(n_blocks, width, hash(raw), out, prints[-1] if prints else acc)
            )
        return out

    def _last_prompt(self, session: str) -> _LastPrompt | None:
        last = self._sessions.get(session)
        return self._sessions_old.get(session) if last is None else last

    def _remember_prompt(self, session: str, last: _LastPrompt) -> None:
        """Keep ``last`` for ``session``; two generations of at most ``memo_blocks / 2`` blocks
        of remembered prompts each (the older one is dropped when the newer one fills)."""
        self._sessions[session] = last
        self._session_blocks += last.blocks
        if self._session_blocks >= self._memo_half:
            self._sessions_old, self._sessions = self._sessions, {}
            self._session_blocks = 0

    def block_hashes(self, token_ids: Sequence[int], session: str | None = None) -> list[bytes]:
        """The hashes of every full block of ``token_ids``, first block first. ``session``
        (optional): a conversation whose prompts grow turn by turn (faster, same result)."""
        return list(map(_DIGEST, self._memoised(token_ids, session)))

    def block_keys(self, token_ids: Sequence[int], session: str | None = None) -> list[int]:
        """:func:`block_key` of every full block of ``token_ids``, first block first
        (``session``: as in :meth:`block_hashes`)."""
        return list(map(_KEY, self._memoised(token_ids, session)))

    def memo_entries(self) -> int:
        """Entries held by the memo now (at most ``memo_blocks``)."""
        return len(self._memo) + len(self._memo_old)
