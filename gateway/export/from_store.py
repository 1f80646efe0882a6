"""Exports straight from the traffic store: a filter, the store's rows, the exporter.

Used by the CLI (``switchyard traffic ...``), the admin API (``/admin/traffic/*``) and the RL
loop (which imports ``gateway.store`` and ``gateway.export`` only). Exports stream rows from the
store's async reader into the exporter, which runs in a worker thread (it is CPU work: PII
scrubbing, MinHash), through a bounded queue of row batches.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from typing import Any, Final, cast

from pydantic import TypeAdapter

from gateway.export.config import ExportConfig
from gateway.export.export import ExportManifest, export_dataset
from gateway.export.rows import ExportRow, FeedbackItem
from gateway.store import InferenceFilter, InferenceRow, StoreBackend

QUEUE_BATCHES = 8
BATCH_ROWS = 500


#: Validates the store's filter from JSON or query parameters (unknown keys are errors) and dumps
#: it into a manifest. The filter itself is defined once, as :class:`InferenceFilter`.
TRAFFIC_QUERY: Final[TypeAdapter[InferenceFilter]] = TypeAdapter(InferenceFilter)


def to_export_row(row: InferenceRow) -> ExportRow:
    inf = row.inference
    feedback = [
        FeedbackItem(kind=f.kind, value=f.value, payload=f.payload, ts=f.ts) for f in row.feedback
    ]
    return cast(
        ExportRow,
        {
            "id": inf.id,
            "ts": inf.ts,
            "api_key_id": inf.api_key_id,
            "episode_id": inf.episode_id,
            "endpoint": inf.endpoint,
            "wire_format": inf.wire_format,
            "request": inf.request,
            "response": inf.response,
            "canonical_request": inf.canonical_request,
            "canonical_response": inf.canonical_response,
            "route_target": inf.route_target,
            "served_model": inf.served_model,
            "weights_version": inf.weights_version,
            "status": inf.status,
            "tags": inf.tags,
            "cost_usd": inf.cost_usd,
            "feedback": feedback,
        },
    )


async def summarize(
    backend: StoreBackend, query: InferenceFilter, group_by: list[str]
) -> list[dict[str, Any]]:
    """Count, errors, cost, latency and TTFT percentiles, acceptance rate per group."""
    return await backend.summarize(query, group_by)


_END = object()


def _drain(q: queue.Queue[object]) -> Iterator[ExportRow]:
    while True:
        item = q.get()
        if item is _END:
            return
        yield from cast(list[ExportRow], item)


async def export_from_store(
    backend: StoreBackend, query: InferenceFilter, config: ExportConfig, *, progress: bool = False
) -> ExportManifest:
    """Export the rows ``query`` selects as ``config`` says; the filters go into the manifest."""
    filters = TRAFFIC_QUERY.dump_python(query, mode="json")
    config = config.model_copy(update={"filters": filters})
    q: queue.Queue[object] = queue.Queue(maxsize=QUEUE_BATCHES)
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["manifest"] = export_dataset(_drain(q), config, progress=progress)
        except BaseException as exc:  # handed to the awaiting coroutine
            result["error"] = exc
            while q.get() is not _END:  # unblock the producer
                pass

    worker = threading.Thread(target=work, name="traffic-export", daemon=True)
    worker.start()
    batch: list[ExportRow] = []
    try:
        async for row in backend.iter_inferences(query):
            batch.append(to_export_row(row))
            if len(batch) >= BATCH_ROWS:
                await asyncio.to_thread(q.put, batch)
                batch = []
        if batch:
            await asyncio.to_thread(q.put, batch)
    finally:
        await asyncio.to_thread(q.put, _END)
        await asyncio.to_thread(worker.join)
    if "error" in result:
        raise result["error"]
    return cast(ExportManifest, result["manifest"])
