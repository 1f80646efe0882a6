"""A request's secrets found, and the request with each one replaced by its placeholder.

:class:`SecretScanner` is the request path's one user of :mod:`traffic.scrub`:

- the scrubber (with detect-secrets, which it imports: ~0.15 s) is imported on a worker thread:
  at start-up when a target's ``secrets`` is ``redact`` or ``block`` (:meth:`prepare`), else
  when the first request needs it (:meth:`ready`, after a reload added such a target); never
  on the event loop, never when no target uses it;
- :meth:`scan` walks the request's bodies (the internal chat body, and the client's own body
  where a door translated it: what a native pass-through sends) with
  :func:`~gateway.secrets.texts.map_request`, detects secrets in each text (PII is left as it
  is: the request path acts on secrets), and numbers the placeholders of the whole request as
  one (:class:`traffic.scrub.Placeholders`): a secret has one placeholder in every message and
  in both bodies, and the numbers follow the conversation's order, so a secret keeps its
  placeholder from one turn to the next (and the provider's prompt cache its prefix);
- a tool call's arguments (JSON text) are decoded and their strings scanned; each original is
  then replaced where it stands, as JSON escapes it, so the arguments keep the provider's own
  spelling (a re-encoding only when an escape is not where expected);
- detections are memoised per text, :data:`MEMO_CHARS` characters of texts at most (emptied
  when full): an agent resends its whole history every turn, and only its new texts are
  scanned. Texts shorter than :data:`SHORTEST` hold no secret the scrubber can name.
- :meth:`scan_async` (the doors') detects on a worker thread when the request's new texts
  exceed :data:`OFF_LOOP_CHARS`; a turn whose history is memoised stays on the event loop.

The cost per request, cold and memoised: docs/secrets.md ("The request path").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from gateway.secrets.texts import Swap, escaped, map_request, map_texts

if TYPE_CHECKING:
    from traffic.scrub import Finding, Placeholders
    from traffic.scrub.rules import Detection

log = logging.getLogger(__name__)

MEMO_CHARS: Final = 8 * 1024 * 1024  # a few long agent conversations
SHORTEST: Final = 10  # chars: the shortest secret the scrubber names is longer with its context
# Texts never seen past this many characters are scanned on a worker thread (about 1 ms of
# CPU: a text costs ~0.13 us a character cold, docs/secrets.md).
OFF_LOOP_CHARS: Final = 8 * 1024


class _Found(NamedTuple):
    """What one text holds: its secrets' spans, and placeholders already written in it; for
    JSON text, its strings and the spans of each (None: plain text)."""

    spans: tuple[Detection, ...]
    in_use: tuple[str, ...]
    leaves: tuple[tuple[str, tuple[Detection, ...]], ...] | None = None

    @property
    def secret(self) -> bool:
        return bool(self.spans) or any(spans for _, spans in self.leaves or ())


_NOTHING: Final = _Found((), ())


@dataclass(frozen=True, slots=True)
class Redaction:
    """The secrets of one request: the bodies with each replaced by its placeholder, and the
    placeholders with their originals (one finding per placeholder, in the request's order)."""

    body: dict[str, Any]
    client_body: dict[str, Any] | None
    swap: Swap

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted({f.kind for f in self.swap.findings}))


class SecretScanner:
    """:mod:`traffic.scrub` for the request path (module docstring). Thread-safe: a large
    body is scanned on a worker thread."""

    def __init__(self, memo_chars: int = MEMO_CHARS) -> None:
        self._future: concurrent.futures.Future[None] | None = None
        self._lock = threading.Lock()
        self._memo: dict[tuple[str, bool], _Found] = {}
        self._memo_chars = memo_chars
        self._chars = 0

    def prepare(self, policies: Iterable[str]) -> None:
        """Start importing the scrubber now when one of ``policies`` (the targets' ``secrets``)
        needs it."""
        if any(p != "allow" for p in policies):
            self._load()

    def _load(self) -> concurrent.futures.Future[None]:
        with self._lock:
            if self._future is None:
                self._future = concurrent.futures.Future()
                threading.Thread(target=self._import, name="scrub-import", daemon=True).start()
            return self._future

    def _import(self) -> None:
        assert self._future is not None
        t0 = time.perf_counter()
        try:
            importlib.import_module("traffic.scrub.scrubber")
        except BaseException as exc:  # handed to every awaiting request
            log.exception("importing traffic.scrub.scrubber failed")
            self._future.set_exception(exc)
            return
        log.info(
            "traffic.scrub.scrubber imported in %.2f s (in the background)",
            time.perf_counter() - t0,
        )
        self._future.set_result(None)

    @property
    def loaded(self) -> bool:
        return self._future is not None and self._future.done()

    async def ready(self) -> None:
        """Once the scrubber is imported (the import started now if it was not)."""
        future = self._load()
        if not future.done():
            await asyncio.wrap_future(future)
        future.result()

    def scan(self, body: dict[str, Any], client_body: dict[str, Any] | None) -> Redaction | None:
        """The request's secrets replaced in both bodies; None when it holds none. Only after
        :meth:`ready`; on the calling thread (:meth:`scan_async` on the event loop)."""
        texts = self._texts(body, client_body)
        self._detect(texts)
        return self._redaction(body, client_body, texts)

    async def scan_async(
        self, body: dict[str, Any], client_body: dict[str, Any] | None
    ) -> Redaction | None:
        """:meth:`scan`, its detections on a worker thread when the texts not memoised add up to
        more than :data:`OFF_LOOP_CHARS` (a turn of a conversation seen before stays on the
        loop: its texts are memoised)."""
        await self.ready()
        texts = self._texts(body, client_body)
        unseen = sum(len(text) for (text, _), found in texts.items() if found is None)
        if unseen > OFF_LOOP_CHARS:
            await asyncio.to_thread(self._detect, texts)
        else:
            self._detect(texts)
        return self._redaction(body, client_body, texts)

    def _texts(
        self, body: dict[str, Any], client_body: dict[str, Any] | None
    ) -> dict[tuple[str, bool], _Found | None]:
        """The request's texts, each with its memoised detections (None: not seen yet)."""
        texts: dict[tuple[str, bool], _Found | None] = {}

        def collect(text: str, encoded: bool) -> str:
            key = (text, encoded)
            if key not in texts:
                texts[key] = _NOTHING if len(text) < SHORTEST else self._memo.get(key)
            return text

        map_request(body, collect)
        if client_body is not None:
            map_request(client_body, collect)
        return texts

    def _detect(self, texts: dict[tuple[str, bool], _Found | None]) -> None:
        """The detections of the texts not seen yet, filled in and memoised."""
        for key, found in texts.items():
            if found is None:
                texts[key] = self._found(*key)

    def _redaction(
        self,
        body: dict[str, Any],
        client_body: dict[str, Any] | None,
        texts: dict[tuple[str, bool], _Found | None],
    ) -> Redaction | None:
        from traffic.scrub.scrubber import Placeholders

        found_in = [(key, found) for key, found in texts.items() if found is not None]
        if not any(found.secret for _, found in found_in):
            return None
        book = Placeholders(p for _, found in found_in for p in found.in_use)
        findings: dict[str, Finding] = {}
        replaced = {
            key: _replace(key[0], found, book, findings) for key, found in found_in if found.secret
        }

        def swap_in(text: str, encoded: bool) -> str:
            return replaced.get((text, encoded), text)

        redacted = map_request(body, swap_in)
        redacted_client = map_request(client_body, swap_in) if client_body is not None else None
        return Redaction(redacted, redacted_client, Swap(findings.values()))

    def _found(self, text: str, encoded: bool) -> _Found:
        if len(text) < SHORTEST:
            return _NOTHING
        key = (text, encoded)
        found = self._memo.get(key)
        if found is None:
            found = _encoded(text, self._found) if encoded else _plain(text)
            if self._chars + len(text) > self._memo_chars:
                self._memo.clear()
                self._chars = 0
            self._memo[key] = found
            self._chars += len(text)
        return found


def _plain(text: str) -> _Found:
    from traffic.scrub.scrubber import PLACEHOLDER, detect

    spans = tuple(detect(text, pii=False))
    return _Found(spans, tuple(PLACEHOLDER.findall(text)) if "<" in text else ())


def _encoded(text: str, found: Callable[[str, bool], _Found]) -> _Found:
    """JSON text (tool-call arguments): the spans of each of its strings; plain text when it is
    not a JSON object or array."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _plain(text)
    if not isinstance(value, dict | list):
        return _plain(text)
    leaves: list[tuple[str, tuple[Detection, ...]]] = []

    def visit(leaf: str, _encoded: bool) -> str:
        leaves.append((leaf, found(leaf, False).spans))
        return leaf

    map_texts(value, visit, free=True)
    from traffic.scrub.scrubber import PLACEHOLDER

    return _Found((), tuple(PLACEHOLDER.findall(text)) if "<" in text else (), tuple(leaves))


def _replace(text: str, found: _Found, book: Placeholders, findings: dict[str, Finding]) -> str:
    """``text`` with its secrets replaced by ``book``'s placeholders, noted in ``findings``."""
    if found.leaves is None:
        scrubbed = book.replace(text, found.spans)
        for f in scrubbed.findings:
            findings.setdefault(f.placeholder, f)
        return scrubbed.text
    out, whole = text, True
    for leaf, spans in found.leaves:
        for f in book.replace(leaf, spans).findings:
            findings.setdefault(f.placeholder, f)
            written = escaped(f.value)
            if written in out:
                out = out.replace(written, f.placeholder)
            else:  # spelled otherwise (\\u escapes): re-encoded below
                whole = False
    if whole:
        return out
    by_value = {f.value: f.placeholder for f in findings.values()}

    def swap_leaf(leaf: str, _encoded: bool) -> str:
        for value, placeholder in by_value.items():
            if value in leaf:
                leaf = leaf.replace(value, placeholder)
        return leaf

    return orjson.dumps(map_texts(orjson.loads(text), swap_leaf, free=True)).decode()
