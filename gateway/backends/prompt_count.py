"""A request's prompt tokens before its call, per target: exact for OpenAI's models, a calibrated
estimate for every other target. Never fetched: the encodings are tiktoken's, as litellm ships
them (:mod:`gateway.backends.tiktoken_files`).

    method(target)  an OpenAI model tiktoken knows (``openai/``, ``azure/``,
                    ``text-completion-openai/``)          -> its encoding: exact
                    any other target (Anthropic, local)    -> o200k_base x the target's ratio
                    (not loaded: a local target alone      -> characters / 4 x the target's ratio
                    never loads it; nor a size bound)
    count(body)     tokens of the body's texts (message contents, names, tool calls' names and
                    arguments, the tools' JSON, a JSON response format) + OpenAI's chat framing
                    (3 a message, 1 a name, 3 priming the answer) + a fixed figure an image
                    (85 at ``detail: low``, else 765: a 1024 x 1024 image at high detail)
    ratio           of the target's reported ``prompt_tokens`` to our count, learned from every
                    answer (:meth:`PromptCounter.observe`): both as running means, the first ten
                    answers' average then each new one weighing 1/10, so long prompts weigh
                    most; 1.0 before the first answer, kept within [1/4, 4]. The estimate's
                    base is o200k_base, the encoding of OpenAI's current models, so that a
                    gateway with both kinds of target holds one encoding (o200k_base alone
                    costs ~77 MB of memory; cl100k_base, litellm's choice for Claude, 32 more).

Anthropic's tokenizer for Claude 3 and later is not published (litellm's local one is Claude
2's; exact counts need its count_tokens API, a network call): hence the calibrated estimate.

Cost: tiktoken encodes about 20 MB/s on this machine (docs/hot_path.md, "Counting prompt
tokens"). Texts of :data:`CACHED_MIN_CHARS` or more are kept with their count (least recently
used first out, ``token_count.cache_chars`` characters at most), so an agent's next turn, which
repeats the system prompt, the tools and the history, encodes only its new messages. A count of
a large body runs on a worker thread (gateway.doors.prompt_gate); the cache is thread-safe.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from gateway.backends.pricing import provider_of
from gateway.backends.tiktoken_files import Encodings
from gateway.config import BackendConfig, TokenCountConfig

if TYPE_CHECKING:
    from tiktoken import Encoding

OPENAI_PROVIDERS: Final = frozenset({"openai", "azure", "text-completion-openai"})
ESTIMATE_BASE: Final = "o200k_base"
CHARS: Final = "chars"  # the method while no encoding is loaded: characters / 4
CHARS_PER_TOKEN: Final = 4
PER_MESSAGE: Final = 3  # OpenAI's framing of each chat message
PER_NAME: Final = 1
REPLY_PRIMING: Final = 3
IMAGE_LOW: Final = 85
IMAGE_OTHER: Final = 765
CACHED_MIN_CHARS: Final = 128  # shorter texts are joined and encoded at once
CALIBRATION_WEIGHT: Final = 0.1
RATIO_BOUNDS: Final = (0.25, 4.0)


@dataclass(frozen=True, slots=True)
class PromptCount:
    """A prompt's size for one target: ``tokens`` (calibrated), ``counted`` (as the method
    counted it), ``method`` (an encoding's name, or ``chars``) and whether it is ``exact``."""

    tokens: int
    counted: int
    method: str
    exact: bool


@dataclass(slots=True)
class _Ratio:
    """Running means of what a target reported and what we counted (module docstring)."""

    reported: float = 0.0
    counted: float = 0.0
    n: int = 0

    def add(self, reported: int, counted: int) -> None:
        self.n += 1
        w = max(1.0 / self.n, CALIBRATION_WEIGHT)
        self.reported += (reported - self.reported) * w
        self.counted += (counted - self.counted) * w

    @property
    def value(self) -> float:
        if self.counted <= 0:
            return 1.0
        low, high = RATIO_BOUNDS
        return min(max(self.reported / self.counted, low), high)


def prompt_texts(body: Mapping[str, Any]) -> tuple[list[str], int]:
    """The texts a tokenizer reads in an internal body (chat or completions), and the tokens it
    adds beyond them (framing, images, token ids given as such)."""
    prompt = body.get("prompt")
    if prompt is not None:
        if isinstance(prompt, str):
            return [prompt], 0
        texts, ids = [], 0
        for item in prompt if isinstance(prompt, list) else ():
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, list):
                ids += len(item)
            else:
                ids += 1
        return texts, ids
    texts, extra = [], REPLY_PRIMING
    for msg in body.get("messages") or ():
        if not isinstance(msg, dict):
            continue
        extra += PER_MESSAGE
        name = msg.get("name")
        if isinstance(name, str) and name:
            extra += PER_NAME
            texts.append(name)
        content = msg.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
                elif part.get("type") == "image_url":
                    image = part.get("image_url")
                    low = isinstance(image, dict) and image.get("detail") == "low"
                    extra += IMAGE_LOW if low else IMAGE_OTHER
        for call in msg.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                texts.extend(v for v in function.values() if isinstance(v, str))
    for key in ("tools", "response_format"):
        value = body.get(key)
        if value:
            texts.append(orjson.dumps(value).decode())
    return texts, extra


class PromptCounter:
    """Counts per target (module docstring); one per process, shared by every request."""

    def __init__(self, config: TokenCountConfig, encodings: Encodings | None = None) -> None:
        self.encodings = encodings if encodings is not None else Encodings()
        self._cache_chars = config.cache_chars
        self._cache: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._cached_chars = 0
        self._lock = threading.Lock()
        self._ratios: dict[tuple[str, str], _Ratio] = {}

    def prepare(self, backends: Mapping[str, BackendConfig]) -> None:
        """Start loading, on a worker thread, the encodings ``backends``' frontier targets count
        with (a local target alone needs none: it is estimated by characters until one is
        loaded)."""
        frontier = [bc for bc in backends.values() if bc.kind == "litellm"]
        models = [m for bc in frontier if (m := _openai_model(bc)) is not None]
        estimated = len(models) < len(frontier)
        self.encodings.load_in_background([ESTIMATE_BASE] if estimated else [], models)

    def method(self, config: BackendConfig, load: bool = True) -> tuple[str, bool]:
        """The encoding a target's prompts are counted with, and whether the count is exact;
        ``chars`` while none is loaded. ``load``: what is not loaded yet starts loading (once);
        a size bound (:meth:`PromptSizes.at_most`) asks without."""
        model = _openai_model(config)
        if model is not None:
            if load and not self.encodings.resolved(model):
                self.encodings.load_in_background(models=[model])
            name = self.encodings.for_model(model)
            if name is not None and self.encodings.get(name) is not None:
                return name, True
        if self.encodings.get(ESTIMATE_BASE) is not None:
            return ESTIMATE_BASE, False
        if load and config.kind == "litellm":  # a local target alone never loads one
            self.encodings.load_in_background([ESTIMATE_BASE])  # once; by chars till then
        return CHARS, False

    def counted(self, method: str, body: Mapping[str, Any]) -> int:
        """The body's tokens by ``method`` (uncalibrated)."""
        return self.counted_texts(method, *prompt_texts(body))

    def counted_texts(self, method: str, texts: list[str], extra: int) -> int:
        """:meth:`counted` of the texts and extra tokens :func:`prompt_texts` read."""
        encoding = self.encodings.get(method)
        if encoding is None:
            chars = sum(len(t) for t in texts)
            return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + extra
        total, short = extra, []
        for text in texts:
            if len(text) >= CACHED_MIN_CHARS and self._cache_chars > 0:
                total += self._cached(encoding, method, text)
            else:
                short.append(text)
        if short:
            total += len(encoding.encode_ordinary("\n".join(short)))
        return total

    def calibrated(self, target: str, method: str, exact: bool, counted: int) -> PromptCount:
        """``counted`` as the target's count: scaled by its ratio unless exact."""
        tokens = counted
        if not exact:
            ratio = self._ratios.get((target, method))
            if ratio is not None:
                tokens = round(counted * ratio.value)
        return PromptCount(tokens, counted, method, exact)

    def observe(self, target: str, count: PromptCount, reported: int) -> None:
        """What ``target`` reported for a prompt counted as ``count``: its estimates' ratio
        learns from it (exact counts are left as they are)."""
        if count.exact or reported <= 0 or count.counted <= 0:
            return
        self._ratios.setdefault((target, count.method), _Ratio()).add(reported, count.counted)

    def ratio(self, target: str, method: str) -> float:
        ratio = self._ratios.get((target, method))
        return ratio.value if ratio is not None else 1.0

    def _cached(self, encoding: Encoding, method: str, text: str) -> int:
        key = (method, text)
        with self._lock:
            tokens = self._cache.get(key)
            if tokens is not None:
                self._cache.move_to_end(key)
                return tokens
        tokens = len(encoding.encode_ordinary(text))  # outside the lock: the long part
        with self._lock:
            if key not in self._cache:
                self._cache[key] = tokens
                self._cached_chars += len(text)
                while self._cached_chars > self._cache_chars and self._cache:
                    (_, old), _ = self._cache.popitem(last=False)
                    self._cached_chars -= len(old)
        return tokens


@dataclass(slots=True)
class PromptSizes:
    """One request's counts by target, each method's count made at most once, and a bound
    that needs no count: no token is shorter than a byte, so an ASCII text has at most as many
    tokens as characters, any other at most four per character (:meth:`at_most`)."""

    counter: PromptCounter
    backends: Mapping[str, BackendConfig]
    body: Mapping[str, Any]
    by_target: dict[str, PromptCount] = field(default_factory=dict)
    _by_method: dict[str, int] = field(default_factory=dict)
    _read: tuple[list[str], int] | None = None
    _bound: int | None = None

    def of(self, target: str) -> PromptCount:
        found = self.by_target.get(target)
        if found is not None:
            return found
        method, exact = self.counter.method(self.backends[target])
        counted = self._by_method.get(method)
        if counted is None:
            counted = self.counter.counted_texts(method, *self._texts())
            self._by_method[method] = counted
        count = self.by_target[target] = self.counter.calibrated(target, method, exact, counted)
        return count

    def tokens(self, target: str) -> int:
        return self.of(target).tokens

    def at_most(self, target: str) -> int:
        """At least :meth:`tokens` of ``target``, without counting (``str.isascii`` is O(1))."""
        bound = self._bound
        if bound is None:
            texts, extra = self._texts()
            bound = self._bound = extra + sum(len(t) if t.isascii() else 4 * len(t) for t in texts)
        method, exact = self.counter.method(self.backends[target], load=False)
        return bound if exact else math.ceil(bound * self.counter.ratio(target, method))

    def _texts(self) -> tuple[list[str], int]:
        if self._read is None:
            self._read = prompt_texts(self.body)
        return self._read


def _openai_model(config: BackendConfig) -> str | None:
    """The bare model name of an OpenAI-family litellm target (tiktoken may know it)."""
    if config.kind != "litellm" or provider_of(config.model) not in OPENAI_PROVIDERS:
        return None
    return config.model.partition("/")[2]
