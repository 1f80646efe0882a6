"""The gateway's handle on the traffic store: the backend plus its async record writer.

The writer runs in a process of its own (:mod:`gateway.recording.process`) unless the config says
otherwise or no process can start; then in this one. Either way the request path only calls
:meth:`RecorderHandle.submit_draft` (or ``submit``; sync, O(1), never blocks or raises), and the
record is assembled by the writer (:mod:`gateway.recording.draft`).
Feedback needs to know whether an inference exists and which key made it; a record may still be
queued in the writer, so the ids (with their key) submitted recently are remembered and checked
before the database. How many: :data:`RECENT_PER_QUEUED` times the writer's ``queue_size`` (the
records it holds in flight before it spools), so an id is remembered well past the time its
record takes to be stored, and the memory stays bounded by the writer's own bound. (A fixed count
large enough for a busy gateway held a sixth of a frontier gateway's memory in ids:
docs/recording.md, "Ids remembered for feedback".)
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict

from gateway.config import StoreSection
from gateway.errors import ServiceUnavailableError
from gateway.recording.draft import InferenceDraft, build_record
from gateway.recording.process import WriterProcess
from traffic.store import (
    FeedbackRecord,
    InferenceOwner,
    InferenceRecord,
    RecordWriter,
    ShadowRecord,
    StoreBackend,
    StoreError,
    StoreUnavailable,
    open_store,
)

log = logging.getLogger(__name__)

RECENT_PER_QUEUED = 5  # 50,000 ids (~9 MB) with the default queue_size


class RecorderHandle:
    def __init__(
        self, backend: StoreBackend, writer: RecordWriter | WriterProcess, recent_ids: int
    ) -> None:
        self.backend = backend
        self.writer = writer
        self._recent_ids = recent_ids
        self._recent: OrderedDict[str, str | None] = OrderedDict()  # id -> its api_key_id

    def submit(self, record: InferenceRecord) -> None:
        self.writer.submit(record)
        self._remember(record.id, record.api_key_id)

    def submit_draft(self, draft: InferenceDraft) -> None:
        """The request path's way: the writer builds the record."""
        writer = self.writer
        if isinstance(writer, WriterProcess):
            writer.submit(draft)
        else:
            writer.submit(build_record(draft))
        self._remember(draft.id, draft.api_key_id)

    def _remember(self, inference_id: str, api_key_id: str | None) -> None:
        recent = self._recent
        recent[inference_id] = api_key_id
        if len(recent) > self._recent_ids:
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


async def open_recorder(config: StoreSection) -> RecorderHandle:
    """Connect (and migrate) the store and start the writer.

    A database that is down at startup does not stop the gateway: the writer spools until it
    returns.
    """
    backend = open_store(config)
    try:
        await backend.connect()
    except StoreError as exc:
        log.error("traffic store unreachable at startup, spooling until it returns: %s", exc)
    writer: RecordWriter | WriterProcess
    if config.writer_process and config.url != "sqlite:///:memory:":
        writer = WriterProcess(config, backend)
    else:
        writer = RecordWriter(backend, config)
    await writer.start()
    return RecorderHandle(backend, writer, RECENT_PER_QUEUED * config.queue_size)
