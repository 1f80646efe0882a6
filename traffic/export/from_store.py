"""Datasets straight from the traffic store: a filter, the store's rows, the exporter.

Used by the gateway's CLI (``switchyard traffic ...``) and admin API (``/admin/traffic/*``),
which write files (:func:`export_from_store`), and by the RL loop, which builds its datasets in
memory (:func:`dataset_from_store`). The store's :class:`~traffic.store.InferenceRow` is the
exporter's input as it is. Rows stream from the store's async reader into the exporter, which
runs in a worker thread (it is CPU work: PII scrubbing, MinHash), through a bounded queue of row
batches.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, TypeVar

from pydantic import TypeAdapter

from traffic.store import InferenceFilter, InferenceRow, StoreBackend

# The dataset pipeline is imported when an export runs: the gateway's start path imports this
# module (TRAFFIC_QUERY, summarize) and must not pay for importing the pipeline
# (docs/recording.md, "Figures behind traffic/'s choices").
if TYPE_CHECKING:
    from traffic.export.config import DatasetConfig, ExportConfig
    from traffic.export.dataset import Dataset
    from traffic.export.export import ExportManifest
    from traffic.export.wire_formats import LegacyTranslator

QUEUE_BATCHES = 8
BATCH_ROWS = 500

T = TypeVar("T")

#: Validates the store's filter from JSON or query parameters (unknown keys are errors) and dumps
#: it into a manifest. The filter itself is defined once, as :class:`InferenceFilter`.
TRAFFIC_QUERY: Final[TypeAdapter[InferenceFilter]] = TypeAdapter(InferenceFilter)


async def summarize(
    backend: StoreBackend, query: InferenceFilter, group_by: list[str]
) -> list[dict[str, Any]]:
    """Count, errors, cost, latency and TTFT percentiles, acceptance rate per group."""
    return await backend.summarize(query, group_by)


async def export_from_store(
    backend: StoreBackend,
    query: InferenceFilter,
    config: ExportConfig,
    *,
    legacy: LegacyTranslator | None = None,
    progress: bool = False,
) -> ExportManifest:
    """Export the rows ``query`` selects as ``config`` says; the filters go into the manifest."""
    from traffic.export.export import export_dataset

    filters = TRAFFIC_QUERY.dump_python(query, mode="json")
    config = config.model_copy(update={"filters": filters})
    return await _consume(
        backend, query, lambda rows: export_dataset(rows, config, progress, legacy=legacy)
    )


async def dataset_from_store(
    backend: StoreBackend,
    query: InferenceFilter,
    config: DatasetConfig,
    *,
    legacy: LegacyTranslator | None = None,
) -> Dataset:
    """Build the dataset ``config`` says from the rows ``query`` selects, in memory."""
    from traffic.export.dataset import build_dataset

    return await _consume(backend, query, lambda rows: build_dataset(rows, config, legacy=legacy))


async def _consume(
    backend: StoreBackend, query: InferenceFilter, work: Callable[[Iterator[InferenceRow]], T]
) -> T:
    """``work`` run on a worker thread over the rows ``query`` selects, read here."""
    q: queue.Queue[list[InferenceRow] | None] = queue.Queue(maxsize=QUEUE_BATCHES)
    results: list[T] = []
    errors: list[BaseException] = []

    def drain() -> Iterator[InferenceRow]:
        while (batch := q.get()) is not None:
            yield from batch

    def run() -> None:
        try:
            results.append(work(drain()))
        except BaseException as exc:  # handed to the awaiting coroutine
            errors.append(exc)
            while q.get() is not None:  # unblock the producer
                pass

    worker = threading.Thread(target=run, name="traffic-export", daemon=True)
    worker.start()
    batch: list[InferenceRow] = []
    try:
        async for row in backend.iter_inferences(query):
            batch.append(row)
            if len(batch) >= BATCH_ROWS:
                await asyncio.to_thread(q.put, batch)
                batch = []
        if batch:
            await asyncio.to_thread(q.put, batch)
    finally:
        await asyncio.to_thread(q.put, None)
        await asyncio.to_thread(worker.join)
    if errors:
        raise errors[0]
    return results[0]
