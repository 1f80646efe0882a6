"""Prompt caching as the providers report it: which prompt tokens a request read from the cache,
and which it wrote there.

OpenAI (automatic, chat completions and responses): prompts of at least 1024 tokens are cached,
in 128-token increments, with no request markup. A request whose prompt starts with a prefix seen
before reports ``cached_tokens`` = the longest matched prefix, rounded down to a multiple of 128,
and only when that is at least 1024 tokens; caching costs nothing extra, so nothing reports
writes.

Anthropic (explicit, messages): the client marks blocks with ``cache_control`` (tools, then
system blocks, then message content blocks: the provider's prompt order). The prefix up to the
last marked block is the one to cache. Looking back from each marked block over at most 20 block
boundaries, the longest prefix cached before is read (``cache_read_input_tokens``); the rest of
the prefix up to the last marked block is written (``cache_creation_input_tokens``), and every
marked prefix is remembered. A prefix shorter than 1024 tokens is never cached. ``input_tokens``
is the rest of the prompt: it excludes what was read and written. TTLs are not modelled: a
prefix stays until the cache forgets it.

Tokens are the simulator's approximation, four characters each (``answers.estimate_tokens``):
a prefix of ``c`` characters is ``c // 4`` tokens, capped so that reads plus writes never exceed
the request's prompt tokens. Prefixes are digests chained block by block (OpenAI: 128-token
chunks of the prompt text; Anthropic: content blocks), seeded with the model name, so the cache
is per model. The cache is an LRU of digests bounded by ``SimulatorConfig.prompt_cache_size``
(0 turns caching off), kept on the app's state: everything is deterministic given the requests.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

CHARS_PER_TOKEN: Final = 4
OPENAI_MIN_TOKENS: Final = 1024
OPENAI_INCREMENT_TOKENS: Final = 128
ANTHROPIC_MIN_TOKENS: Final = 1024
ANTHROPIC_LOOKBACK_BLOCKS: Final = 20
_CHUNK_CHARS: Final = OPENAI_INCREMENT_TOKENS * CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True)
class CacheUse:
    """Prompt tokens one request read from the cache and wrote to it."""

    read: int = 0
    written: int = 0


NO_CACHE: Final = CacheUse()


@dataclass(frozen=True, slots=True)
class AutomaticPrefix:
    """OpenAI: the prompt's text in the provider's order (tools, then the messages)."""

    model: str
    text: str


@dataclass(frozen=True, slots=True)
class PromptBlock:
    """One Anthropic prompt block: what identifies its content, its size, its marker."""

    content: bytes
    chars: int
    marked: bool  # carries cache_control


@dataclass(frozen=True, slots=True)
class MarkedBlocks:
    """Anthropic: the prompt's blocks in the provider's order (tools, system, messages)."""

    model: str
    blocks: tuple[PromptBlock, ...]


CacheablePrompt = AutomaticPrefix | MarkedBlocks


def _chain(previous: bytes, content: bytes) -> bytes:
    return hashlib.blake2b(previous + content, digest_size=16).digest()


class PromptCache:
    """The prefixes a simulated provider remembers, least recently used forgotten first."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def clear(self) -> None:
        self._seen.clear()

    def use(self, prompt: CacheablePrompt | None, prompt_tokens: int) -> CacheUse:
        """What a request with this prompt reads and writes; remembers its prefixes."""
        if prompt is None or self.capacity == 0:
            return NO_CACHE
        if isinstance(prompt, AutomaticPrefix):
            return self._automatic(prompt, prompt_tokens)
        return self._marked(prompt, prompt_tokens)

    def _hit(self, digest: bytes) -> bool:
        if digest in self._seen:
            self._seen.move_to_end(digest)
            return True
        return False

    def _remember(self, digest: bytes) -> None:
        self._seen[digest] = None
        self._seen.move_to_end(digest)
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def _automatic(self, prompt: AutomaticPrefix, prompt_tokens: int) -> CacheUse:
        chunks = len(prompt.text) // _CHUNK_CHARS
        if chunks * OPENAI_INCREMENT_TOKENS < OPENAI_MIN_TOKENS:
            return NO_CACHE  # too short to be cached, or to hit
        digest, digests = prompt.model.encode(), []
        for k in range(chunks):
            digest = _chain(digest, prompt.text[k * _CHUNK_CHARS : (k + 1) * _CHUNK_CHARS].encode())
            digests.append(digest)
        matched = 0
        while matched < chunks and self._hit(digests[matched]):
            matched += 1
        for digest in digests[matched:]:
            self._remember(digest)
        cached = min(matched * OPENAI_INCREMENT_TOKENS, prompt_tokens)
        cached -= cached % OPENAI_INCREMENT_TOKENS
        return CacheUse(read=cached if cached >= OPENAI_MIN_TOKENS else 0)

    def _marked(self, prompt: MarkedBlocks, prompt_tokens: int) -> CacheUse:
        marked = [i + 1 for i, b in enumerate(prompt.blocks) if b.marked]  # boundaries after them
        if not marked:
            return NO_CACHE
        digests, chars, digest, total = [prompt.model.encode()], [0], prompt.model.encode(), 0
        for block in prompt.blocks[: marked[-1]]:
            digest, total = _chain(digest, block.content), total + block.chars
            digests.append(digest)
            chars.append(total)

        def tokens(boundary: int) -> int:
            return min(chars[boundary] // CHARS_PER_TOKEN, prompt_tokens)

        read_at = self._longest_hit(digests, marked)
        for boundary in marked:
            if tokens(boundary) >= ANTHROPIC_MIN_TOKENS:
                self._remember(digests[boundary])
        read = tokens(read_at)
        last = tokens(marked[-1])
        written = last - read if last >= ANTHROPIC_MIN_TOKENS else 0
        return CacheUse(read=read, written=written)

    def _longest_hit(self, digests: list[bytes], marked: list[int]) -> int:
        """The longest cached prefix (a block boundary) within the lookback of a marker; 0: none."""
        for boundary in reversed(marked):
            for candidate in range(boundary, max(boundary - ANTHROPIC_LOOKBACK_BLOCKS, 1) - 1, -1):
                if self._hit(digests[candidate]):
                    return candidate
        return 0
