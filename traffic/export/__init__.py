"""Dataset exporters: recorded traffic in, trainer-ready SFT / preference / RL-prompt records out.

The input is the store's own row, :class:`traffic.store.InferenceRow` (an inference with its
feedback), read as it is. Modules, in pipeline order: ``conversation`` (any wire format to OpenAI
chat messages; its types live in ``turns``; ``wire_formats`` puts each record in the internal
format, the conversation the served model saw, and ``chat_format`` parses that format),
``labels`` (feedback summary), ``pii`` (scrubbing), ``builders`` (record formats; shared
pieces in ``records``, pairs in ``preference``), ``dedup`` (exact and MinHash-LSH), ``split``
(time-based, episode-preserving), ``dataset`` (the pipeline, records in memory: what the RL loop
trains on), ``writers`` and ``export`` (the same records as JSONL / Parquet files and a
manifest); ``config`` holds every setting. ``from_store`` feeds either from the traffic store:
the rows are chosen by the store's own filter (``traffic.store.InferenceFilter``), validated
from JSON by ``TRAFFIC_QUERY``.
"""

from traffic.export.config import (
    BuildConfig,
    DatasetConfig,
    DatasetKind,
    DedupConfig,
    ExportConfig,
    SplitConfig,
)
from traffic.export.dataset import Dataset, ExportCounts, build_dataset
from traffic.export.export import ExportManifest, export_dataset
from traffic.export.from_store import (
    TRAFFIC_QUERY,
    dataset_from_store,
    export_from_store,
    summarize,
)
from traffic.export.turns import UnsupportedShape
from traffic.export.wire_formats import LegacyTranslator

__all__ = [
    "TRAFFIC_QUERY",
    "BuildConfig",
    "Dataset",
    "DatasetConfig",
    "DatasetKind",
    "DedupConfig",
    "ExportConfig",
    "ExportCounts",
    "ExportManifest",
    "LegacyTranslator",
    "SplitConfig",
    "UnsupportedShape",
    "build_dataset",
    "dataset_from_store",
    "export_dataset",
    "export_from_store",
    "summarize",
]
