"""The gateway's handle on the traffic store: the backend plus its async record writer.

The request path only calls :meth:`RecorderHandle.submit` (sync, O(1), never blocks or raises).
Feedback needs to know whether an inference exists and which key made it; a record may still be
queued in the writer, so the ids (with their key) submitted recently are remembered (bounded) and
checked before the database.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict

from gateway.errors import ServiceUnavailableError
from traffic.store import (
    FeedbackRecord,
    InferenceOwner,
    InferenceRecord,
    RecordWriter,
    ShadowRecord,
    StoreBackend,
    StoreConfig,
    StoreError,
    StoreUnavailable,
    open_store,
)

log = logging.getLogger(__name__)

RECENT_IDS = 200_000


class RecorderHandle:
    def __init__(self, backend: StoreBackend, writer: RecordWriter) -> None:
        self.backend = backend
        self.writer = writer
        self._recent: OrderedDict[str, str | None] = OrderedDict()  # id -> its api_key_id

    def submit(self, record: InferenceRecord) -> None:
        self.writer.submit(record)
        recent = self._recent
        recent[record.id] = record.api_key_id
        if len(recent) > RECENT_IDS:
            recent.popitem(last=False)

    def submit_feedback(self, record: FeedbackRecord) -> None:
        self.writer.submit(record)

    def submit_shadow(self, record: ShadowRecord) -> None:
        self.writer.submit(record)

    async def inference_owner(self, inference_id: str) -> InferenceOwner | None:
        """Who made the inference; None when there is none with that id. 503 while the store
        cannot answer (the id may exist)."""
        if inference_id in self._recent:
            return InferenceOwner(self._recent[inference_id])
        try:
            return await self.backend.inference_owner(inference_id)
        except StoreUnavailable as exc:
            raise ServiceUnavailableError(
                "The traffic store cannot be read right now; retry shortly.",
                code="store_unavailable",
            ) from exc

    def stats(self) -> dict[str, float]:
        snapshot = self.writer.stats()
        return {
            f.name: float(getattr(snapshot, f.name))
            for f in dataclasses.fields(snapshot)
            if isinstance(getattr(snapshot, f.name), int | float)
            and not isinstance(getattr(snapshot, f.name), bool)
        }

    async def aclose(self) -> None:
        try:
            await self.writer.close()
        finally:
            await self.backend.close()


async def open_recorder(config: StoreConfig) -> RecorderHandle:
    """Connect (and migrate) the store and start the writer.

    A database that is down at startup does not stop the gateway: the writer spools until it
    returns.
    """
    backend = open_store(config)
    try:
        await backend.connect()
    except StoreError as exc:
        log.error("traffic store unreachable at startup, spooling until it returns: %s", exc)
    writer = RecordWriter(backend, config)
    await writer.start()
    return RecorderHandle(backend, writer)
