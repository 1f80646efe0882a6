"""Our block hashes are vLLM's, bit for bit (checked against vLLM's own functions)."""

from __future__ import annotations

import random

import pytest

from router.block_hash import DEFAULT_NONE_HASH_SEED, BlockHasher, block_key

vllm_hashing = pytest.importorskip("vllm.utils.hashing", reason="vllm is not installed")
kv_cache_utils = pytest.importorskip("vllm.v1.core.kv_cache_utils")


def _vllm_chain(algo: str, tokens: list[int], block_size: int) -> list[bytes]:
    fn = vllm_hashing.get_hash_fn_by_name(algo)
    kv_cache_utils.init_none_hash(fn)
    parent = None
    out = []
    for i in range(len(tokens) // block_size):
        parent = kv_cache_utils.hash_block_tokens(
            fn, parent, tokens[i * block_size : (i + 1) * block_size]
        )
        out.append(parent)
    return out


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    # Every CBOR integer width: < 24, one byte, two bytes, four bytes, eight bytes.
    widths = [24, 256, 65_536, 2**32, 2**40]
    return [rng.randrange(rng.choice(widths)) for _ in range(n)]


@pytest.fixture(autouse=True)
def _no_pythonhashseed(monkeypatch: pytest.MonkeyPatch) -> None:
    # vLLM derives NONE_HASH from PYTHONHASHSEED when it is set; the default seed otherwise.
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


@pytest.mark.parametrize("algo", ["sha256_cbor", "sha256"])
@pytest.mark.parametrize("block_size", [16, 32])
def test_hashes_equal_vllms(algo: str, block_size: int) -> None:
    tokens = _tokens(10 * block_size + 7, seed=block_size)
    hasher = BlockHasher(block_size, algo)  # type: ignore[arg-type]
    expected = _vllm_chain(algo, tokens, block_size)
    assert hasher.block_hashes(tokens) == expected
    assert hasher.none_hash == kv_cache_utils.NONE_HASH
    # Second pass is served by the memo and must not change a bit.
    assert hasher.block_hashes(tokens) == expected


def test_none_hash_follows_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "1234")
    kv_cache_utils.init_none_hash(vllm_hashing.sha256_cbor)
    assert BlockHasher(32, none_hash_seed="1234").none_hash == kv_cache_utils.NONE_HASH
    assert BlockHasher(32).none_hash != kv_cache_utils.NONE_HASH
    assert DEFAULT_NONE_HASH_SEED == kv_cache_utils.DEFAULT_NONE_HASH_SEED


def test_partial_blocks_are_not_hashed_and_prefixes_share_hashes() -> None:
    hasher = BlockHasher(4)
    assert hasher.block_hashes([1, 2, 3]) == []
    long = hasher.block_hashes(list(range(100, 112)))
    short = hasher.block_hashes(list(range(100, 110)))
    assert len(long) == 3 and short == long[:2]
    other = hasher.block_hashes([*range(100, 104), 9, *range(105, 112)])
    assert other[0] == long[0] and other[1] != long[1] and other[2] != long[2]


def test_block_key_is_the_int_vllm_publishes_in_events() -> None:
    digest = BlockHasher(32).block_hashes(list(range(32)))[0]
    assert block_key(digest) == int.from_bytes(digest, "big") & (2**64 - 1)
    assert block_key(block_key(digest)) == block_key(digest)
    assert BlockHasher(32).block_keys(list(range(32))) == [block_key(digest)]


def test_memo_stays_bounded() -> None:
    hasher = BlockHasher(4, memo_blocks=10)
    for start in range(0, 4000, 40):
        hasher.block_keys(list(range(start, start + 40)))
    assert hasher.memo_entries() <= 10


def test_unreproducible_algorithms_are_refused() -> None:
    with pytest.raises(ValueError, match="sha256_cbor"):
        BlockHasher(32, "xxhash")  # type: ignore[arg-type]


def test_a_sessions_growing_prompt_hashes_as_without_the_session() -> None:
    rng = random.Random(5)
    plain, with_session = BlockHasher(16), BlockHasher(16)
    prompt = [rng.randrange(300, 8000) for _ in range(100)]
    for turn in range(6):
        prompt = prompt + [rng.randrange(300, 8000) for _ in range(rng.randrange(1, 40))]
        if turn == 3:  # the client edited its history: same session, different prefix
            prompt[5] += 1
        if turn == 4:  # ids of every CBOR width: the packed layout changes
            prompt[-1] = 2**40
        assert with_session.block_keys(prompt, "s1") == plain.block_keys(prompt)
        assert with_session.block_hashes(prompt[:50], "s1") == plain.block_hashes(prompt[:50])
    assert with_session.block_keys([1, 2, 3], "s1") == []


def test_remembered_prompts_stay_bounded() -> None:
    hasher = BlockHasher(4, memo_blocks=40)
    for session in range(100):
        hasher.block_keys(list(range(session, session + 40)), f"s{session}")
    remembered = hasher._sessions | hasher._sessions_old
    assert sum(last.blocks for last in remembered.values()) <= 40
