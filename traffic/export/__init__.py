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

Importing a submodule (``traffic.export.turns``, as the gateway does) does not import the rest:
the names below are loaded on first use (PEP 562), so the gateway's start path does not pay for
importing the dataset pipeline (its builders and configs; docs/recording.md, "Figures behind
traffic/'s choices").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_LAZY: dict[str, str] = {
    "BuildConfig": "traffic.export.config",
    "Dataset": "traffic.export.dataset",
    "DatasetConfig": "traffic.export.config",
    "DatasetKind": "traffic.export.config",
    "DedupConfig": "traffic.export.config",
    "Episode": "traffic.export.episodes",
    "EpisodeExportConfig": "traffic.export.episode_export",
    "EpisodeExportManifest": "traffic.export.episode_export",
    "ExportConfig": "traffic.export.config",
    "ExportCounts": "traffic.export.dataset",
    "ExportManifest": "traffic.export.export",
    "LegacyTranslator": "traffic.export.wire_formats",
    "RouteKinds": "traffic.export.episodes",
    "SplitConfig": "traffic.export.config",
    "TRAFFIC_QUERY": "traffic.export.from_store",
    "UnsupportedShape": "traffic.export.turns",
    "build_dataset": "traffic.export.dataset",
    "dataset_from_store": "traffic.export.from_store",
    "episode_view": "traffic.export.episodes",
    "export_dataset": "traffic.export.export",
    "export_episodes": "traffic.export.episode_export",
    "export_episodes_from_store": "traffic.export.episode_export",
    "export_from_store": "traffic.export.from_store",
    "load_episode": "traffic.export.episode_export",
    "rebuild_episode": "traffic.export.episodes",
    "summarize": "traffic.export.from_store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traffic.export' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


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
