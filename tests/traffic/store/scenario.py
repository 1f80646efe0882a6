"""How the store tests set up situations: records placed in time, waiting on the writer."""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from traffic.store import InferenceRecord


def id_at(at: datetime) -> str:
    """A UUIDv7 whose timestamp is ``at`` (to place records in time)."""
    ms = int(at.timestamp() * 1000)
    value = ms << 80 | 0x7 << 76 | secrets.randbits(12) << 64 | 0b10 << 62 | secrets.randbits(62)
    return str(uuid.UUID(int=value))


def inference(at: datetime | None = None, **fields: Any) -> InferenceRecord:
    """An inference with plausible defaults; ``fields`` override them."""
    if at is not None:
        fields.setdefault("id", id_at(at))
        fields.setdefault("ts", at)
    base: dict[str, Any] = {
        "endpoint": "chat.completions",
        "wire_format": "openai.chat",
        "request": {"model": "auto", "messages": [{"role": "user", "content": "hi"}]},
        "response": {"choices": [{"message": {"role": "assistant", "content": "hello"}}]},
        "route_target": "local",
        "served_model": "tiny-moe",
        "status": 200,
        "latency_ms": 10.0,
    }
    base.update(fields)
    return InferenceRecord(**base)


def day(d: int, hour: int = 12) -> datetime:
    return datetime(2025, 3, d, hour, 0, tzinfo=UTC)


async def wait_until(condition: Callable[[], bool], within_s: float = 15.0) -> None:
    """Poll ``condition`` until true; fail the test after ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {within_s}s")
        await asyncio.sleep(0.01)
