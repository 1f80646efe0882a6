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
from JSON by ``TRAFFIC_QUERY``. ``episodes`` rebuilds an agent's whole trajectory from the turns
of one episode, and ``episode_export`` writes episodes as multi-turn tool-calling SFT data and
RL episodes.
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
from traffic.export.episode_export import (
    EpisodeExportConfig,
    EpisodeExportManifest,
    export_episodes,
    export_episodes_from_store,
    load_episode,
)
from traffic.export.episodes import Episode, RouteKinds, episode_view, rebuild_episode
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
    "Episode",
    "EpisodeExportConfig",
    "EpisodeExportManifest",
    "ExportConfig",
    "ExportCounts",
    "ExportManifest",
    "LegacyTranslator",
    "RouteKinds",
    "SplitConfig",
    "UnsupportedShape",
    "build_dataset",
    "dataset_from_store",
    "episode_view",
    "export_dataset",
    "export_episodes",
    "export_episodes_from_store",
    "export_from_store",
    "load_episode",
    "rebuild_episode",
    "summarize",
]
