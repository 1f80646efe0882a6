"""How a request becomes a sparse hashed feature vector for the request scorer.

The scorer reads :class:`~router.request_text.RequestText`, the request view any door (chat
completions, completions, Responses, Messages) fills without tokenizing.
:meth:`Featurizer.featurize` turns it into ``(indices, values)`` over
a ``2**dim_bits`` space; every feature name is hashed with CRC-32 (stable across processes and
machines, unlike Python's salted ``hash()``), so a model fitted in the RL loop scores the same in
the gateway.

Features (each family of features is salted, so equal strings in two families do not collide):

- text n-grams of the last user turn: the text is capped to its first ``head_chars`` and last
  ``tail_chars`` characters (bounded cost for any prompt: IDE asks put the instruction at the
  end, agents at the start), lowercased, digit runs mapped to ``0``, split into words on
  anything that is not a letter or digit (so ``lookup_delta_total`` gives three words). Unigrams
  and bigrams, each of value ``1 / sqrt(number of n-grams)``: the text block has unit norm
  (term-frequency weighted), so a long prompt does not outvote the request's other features.
- the last line of that text (the ask, in IDE requests) as its own unigrams, same weighting.
- code signals: a fenced block, the words ``def`` / ``class`` / ``import``, a ``Traceback``;
  the line-count bucket of the capped text.
- request shape: endpoint, turn-count bucket, prompt-length bucket (``prompt_chars``, log2), the
  system prompt's head hash (its first ``system_head_chars``: which client / product, ignoring the
  per-session details clients append) and its length bucket, tool names (the first
  ``max_tools``), tool-count bucket, ``has_tools``.
- agent step (requests that offer tools: an agent loop's turn): the step-index bucket within
  the episode (``RequestText.step``, the assistant turns so far), whether the last message is a
  tool result, whether that result is an error, and the bucket of the error streak (the tool
  results that are errors since the last one that is not). A request without tools gets none
  of them (its vector is unchanged).

Buckets are ``floor(log2(1 + x))``. Categorical features have value 1. Nothing here raises on
odd input: empty text, no system prompt, unknown tools, non-ASCII text all give a vector.
"""

from __future__ import annotations

import math
from zlib import crc32

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from router.request_text import RequestText as RequestText  # re-exported: the scorer's input

IndexArray = npt.NDArray[np.int64]
ValueArray = npt.NDArray[np.float32]


def _word_table() -> bytes:
    """Byte map: letters lowercased, digits -> ``0``, non-ASCII bytes kept, the rest a space."""
    table = bytearray(b" " * 256)
    for b in range(256):
        if ord("a") <= b <= ord("z") or b >= 0x80:
            table[b] = b
        elif ord("A") <= b <= ord("Z"):
            table[b] = b + 32
        elif ord("0") <= b <= ord("9"):
            table[b] = ord("0")
    return bytes(table)


_WORD_TABLE = _word_table()
# Odd 64-bit multipliers (golden ratio and a splitmix constant): bigram and namespace mixing.
_MUL_LEFT = np.uint64(0x9E3779B97F4A7C15)
_MUL_MIX = np.uint64(0xBF58476D1CE4E5B9)
_SALT_TAIL = np.uint64(0x5DEECE66D)
_SHIFT = np.uint64(29)


class FeaturizerConfig(BaseModel):
    """How requests are featurized; stored with a fitted scorer (a model only fits its space)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dim_bits: int = Field(default=18, ge=8, le=24, description="Feature space is 2**dim_bits.")
    head_chars: int = Field(default=1500, ge=0, description="Leading user-text chars read.")
    tail_chars: int = Field(default=500, ge=0, description="Trailing user-text chars read.")
    system_head_chars: int = Field(
        default=512, ge=0, description="System-prompt chars hashed to identify the client."
    )
    max_tools: int = Field(default=64, ge=0, description="Tool names read per request.")


def _bucket(x: int) -> int:
    return int(math.log2(1 + max(0, x)))


def capped(text: str, head: int, tail: int) -> str:
    """The first ``head`` and last ``tail`` characters of ``text`` (all of it if shorter)."""
    if len(text) <= head + tail:
        return text
    return text[:head] + "\n" + (text[-tail:] if tail else "")


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")  # a lone surrogate from JSON must not raise


def _words(text: str) -> list[bytes]:
    # translate + split runs in C: a third of the cost of a regex over the same text
    return text.encode("utf-8", "ignore").translate(_WORD_TABLE).split()


def _last_line(text: str) -> str:
    stripped = text.rstrip()
    return stripped[stripped.rfind("\n") + 1 :]


class Featurizer:
    """``featurize(text) -> (indices, values)``; holds the config's precomputed constants."""

    def __init__(self, config: FeaturizerConfig | None = None) -> None:
        self.config = config or FeaturizerConfig()
        self.dim = 1 << self.config.dim_bits
        self._mask = np.uint64(self.dim - 1)

    def _named(self, names: list[str]) -> list[int]:
        mask = self.dim - 1
        return [crc32(_utf8(n)) & mask for n in names]

    def _index(self, hashes: npt.NDArray[np.uint64]) -> IndexArray:
        mixed = hashes * _MUL_MIX  # wraps mod 2**64: a multiplicative mix, then xor-shift
        out: IndexArray = ((mixed ^ (mixed >> _SHIFT)) & self._mask).astype(np.int64)
        return out

    def _ngrams(self, words: list[bytes]) -> IndexArray:
        """Unigram and bigram indices of ``words``."""
        hashes = np.array(list(map(crc32, words)), dtype=np.uint64)
        bigrams = hashes[:-1] * _MUL_LEFT + hashes[1:]
        return self._index(np.concatenate((hashes, bigrams)))

    def _salted(self, words: list[bytes], salt: np.uint64) -> IndexArray:
        """Unigram indices of ``words`` in the namespace ``salt``."""
        return self._index(np.array(list(map(crc32, words)), dtype=np.uint64) ^ salt)

    def categorical(self, text: RequestText, body: str) -> list[str]:
        """Names of the request's categorical features (value 1 each)."""
        cfg = self.config
        names = [
            f"endpoint={text.endpoint}",
            f"turns={_bucket(text.turns)}",
            f"chars={_bucket(text.prompt_chars)}",
            f"sys={crc32(_utf8(text.system[: cfg.system_head_chars])):x}",
            f"syslen={_bucket(len(text.system))}",
            f"tools={_bucket(len(text.tool_names))}",
            f"has_tools={text.has_tools}",
            f"lines={_bucket(body.count(chr(10)))}",
        ]
        if not body.strip():
            names.append("no_user_text")
        if "```" in body:
            names.append("code:fence")
        names.extend(f"code:{kw}" for kw in ("def ", "class ", "import ") if kw in body)
        if "Traceback (most recent call last)" in body:
            names.append("code:traceback")
        names.extend(f"tool={name}" for name in text.tool_names[: cfg.max_tools])
        if text.has_tools:
            names.append(f"agent_step={_bucket(text.step)}")
            if text.last_tool_result:
                names.append("agent_last=tool_result")
            if text.last_tool_error:
                names.append("agent_last=tool_error")
            if text.tool_error_streak:
                names.append(f"agent_error_streak={_bucket(text.tool_error_streak)}")
        return names

    def featurize(self, text: RequestText) -> tuple[IndexArray, ValueArray]:
        """The request's sparse vector; indices may repeat (their values add up)."""
        cfg = self.config
        body = capped(text.last_user, cfg.head_chars, cfg.tail_chars)
        grams = self._ngrams(_words(body))
        tail = self._salted(_words(_last_line(body)), _SALT_TAIL)
        cats = np.array(self._named(self.categorical(text, body)), dtype=np.int64)
        n_text = len(grams) + len(tail)
        text_value = 1.0 / math.sqrt(n_text) if n_text else 0.0
        indices = np.concatenate((grams, tail, cats))
        values = np.full(len(indices), text_value, dtype=np.float32)
        values[n_text:] = 1.0
        return indices, values
