"""Dataset exporters: recorded traffic in, trainer-ready SFT / preference / RL-prompt files out.

Modules, in pipeline order: ``rows`` (input shape), ``conversation`` (any wire format to OpenAI
chat messages; its types live in ``turns``; ``wire_formats`` puts each record in the internal
format, the conversation the served model saw, and ``chat_format`` parses that format),
``labels`` (feedback summary), ``pii`` (scrubbing), ``builders`` (record formats; shared
pieces in ``records``, pairs in ``preference``), ``dedup`` (exact and MinHash-LSH), ``split``
(time-based, episode-preserving), ``writers`` (all file output) and ``export`` (the pipeline);
``config`` holds every setting. ``from_store`` feeds it from the traffic store: the rows are
chosen by the store's own filter (``gateway.store.InferenceFilter``), validated from JSON by
``TRAFFIC_QUERY``.
"""

from gateway.export.config import BuildConfig, DedupConfig, ExportConfig, SplitConfig
from gateway.export.export import ExportCounts, ExportManifest, export_dataset
from gateway.export.from_store import TRAFFIC_QUERY, export_from_store, summarize
from gateway.export.rows import ExportRow, FeedbackItem

__all__ = [
    "TRAFFIC_QUERY",
    "BuildConfig",
    "DedupConfig",
    "ExportConfig",
    "ExportCounts",
    "ExportManifest",
    "ExportRow",
    "FeedbackItem",
    "SplitConfig",
    "export_dataset",
    "export_from_store",
    "summarize",
]
