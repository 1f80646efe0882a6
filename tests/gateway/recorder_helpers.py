"""What the record writer process's tests share: a streamed draft, a running writer process on
a fresh SQLite store, its child's pid, and waits (a condition; the store holding what it should)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from gateway.recording.draft import Deferred, InferenceDraft, from_raw
from gateway.recording.process import WriterProcess
from traffic.store import InferenceFilter, StoreBackend, StoreConfig, open_store
from traffic.store.ids import new_id


def stream_draft(text: str) -> InferenceDraft:
    """A streamed chat exchange's draft whose answer is ``text``."""
    raw = [b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices"'
           b':[{"index":0,"delta":{"content":"%s"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'
           % text.encode()]  # fmt: skip
    return InferenceDraft(
        new_id(), time.time(), None, None, "chat.completions", "openai.chat", {"model": "m"},
        None, Deferred(from_raw, ("chat.completions", raw)), "local", "m", None, None, None,
        None, 200, None, True, 1.0, 0.5, 1, 1, None, None, None, {}, [],
    )  # fmt: skip


async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def child_pid(writer: WriterProcess) -> int:
    proc = writer._proc
    assert proc is not None
    return proc.pid


def store_config(tmp_path: Path, **settings: Any) -> StoreConfig:
    return StoreConfig(
        url=f"sqlite:///{tmp_path / 't.db'}", spool_dir=tmp_path / "spool", **settings
    )


@contextlib.asynccontextmanager
async def running_writer(tmp_path: Path, **settings: Any) -> AsyncIterator[WriterProcess]:
    """A writer process on a fresh SQLite store (``store_config``), its child started and
    reporting; closed on the way out (a test may close it first)."""
    config = store_config(tmp_path, **settings)
    backend = open_store(config)
    await backend.connect()
    writer = WriterProcess(config, backend)
    await writer.start()
    try:
        await until(lambda: writer.stats().tasks_alive == 3)
        yield writer
    finally:
        await writer.close()
        await backend.close()


async def stored(backend: StoreBackend) -> dict[str, str | None]:
    """Every stored inference: id -> its answer's text."""
    out: dict[str, str | None] = {}
    async for row in backend.iter_inferences(InferenceFilter()):
        answer = row.inference.response
        out[row.inference.id] = answer["choices"][0]["message"]["content"] if answer else None
    return out


async def read_stored(tmp_path: Path) -> dict[str, str | None]:
    """What the store of ``store_config(tmp_path)`` holds now, read from its file."""
    backend = open_store(StoreConfig(url=f"sqlite:///{tmp_path / 't.db'}"))
    await backend.connect()
    try:
        return await stored(backend)
    finally:
        await backend.close()


async def until_stored(tmp_path: Path, expected: dict[str, str | None]) -> None:
    """Until the store holds exactly ``expected`` (id -> answer text); read from its file."""
    backend = open_store(StoreConfig(url=f"sqlite:///{tmp_path / 't.db'}"))
    await backend.connect()
    try:
        deadline = time.monotonic() + 30
        while (now := await stored(backend)) != expected:
            assert time.monotonic() < deadline, f"{len(now)} of {len(expected)} stored"
            await asyncio.sleep(0.05)
    finally:
        await backend.close()
