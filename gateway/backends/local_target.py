"""The running parts of one local (vLLM) target: replica pool, replica selector, and the
feeds the selector needs (``/metrics`` scraper for load, KV event subscriber in precise mode,
the served model's tokenizer for cache-aware block hashing).

Built when the config names the target and reused across reloads while its config is unchanged
(a reload must not reset the selector's prefix index); replaced and stopped otherwise.

Tokenizers never hold up start-up: each one a cache-aware target names starts loading on a
worker thread and, until it is loaded, gives no token ids, so the selector scores on load alone
for those first requests. They are kept by directory across reloads (and shared by the targets
naming the same one); one that failed to load is tried again at the next reload, which waits
(off the event loop) for the tokenizers it starts.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from gateway.backends.replica_metrics import ReplicaMetricsScraper
from gateway.backends.replica_pool import ReplicaPool
from gateway.config import BackendConfig, SwitchyardConfig
from gateway.local.kv_events import KvEventSubscriber
from gateway.local.prompt_tokens import PromptTokenizer
from router.selector_config import CacheAwareConfig, LeastLoadConfig
from router.selectors import ObservingSelector, build_selector


def load_tokenizers(
    config: SwitchyardConfig, known: dict[str, PromptTokenizer]
) -> dict[str, PromptTokenizer]:
    """Tokenizers of cache-aware targets by directory: those in ``known`` kept, the others
    loading on worker threads (returns at once; answers ``None`` for token ids until loaded)."""
    out: dict[str, PromptTokenizer] = {}
    for bc in config.backends.values():
        d = bc.tokenizer_dir
        if d is None or not isinstance(bc.replica_selector, CacheAwareConfig) or d in out:
            continue
        tokenizer = known.get(d) or PromptTokenizer(d)
        tokenizer.load_in_background()  # a no-op once loaded or while loading
        out[d] = tokenizer
    return out


@dataclass
class LocalTarget:
    config: BackendConfig
    pool: ReplicaPool
    selector: ObservingSelector
    tokenizer: PromptTokenizer | None  # maybe still loading (see the module docstring)
    scraper: ReplicaMetricsScraper | None = None
    subscriber: KvEventSubscriber | None = None

    @classmethod
    def start(
        cls,
        config: BackendConfig,
        session: aiohttp.ClientSession,
        tokenizers: dict[str, PromptTokenizer],
    ) -> LocalTarget:
        urls = [u.rstrip("/") for u in config.replicas]
        pool = ReplicaPool(urls, config.weights_version, config.health)
        pool.start_probing(session)
        sel_cfg = config.replica_selector
        selector = build_selector(sel_cfg)
        tokenizer = tokenizers.get(config.tokenizer_dir) if config.tokenizer_dir else None
        target = cls(config, pool, selector, tokenizer)
        if isinstance(sel_cfg, LeastLoadConfig | CacheAwareConfig):
            precise = isinstance(sel_cfg, CacheAwareConfig) and sel_cfg.mode == "precise"
            target.scraper = ReplicaMetricsScraper(
                urls,
                selector,
                session,
                interval_s=sel_cfg.load.scrape_interval_s,
                block_size=sel_cfg.block_size if isinstance(sel_cfg, CacheAwareConfig) else None,
                hash_algo=sel_cfg.hash_algo
                if precise and isinstance(sel_cfg, CacheAwareConfig)
                else None,
            )
            target.scraper.start()
            if precise and isinstance(sel_cfg, CacheAwareConfig):
                target.subscriber = KvEventSubscriber.from_config(sel_cfg, selector)
                target.subscriber.start()
        return target

    def same_config(self, config: BackendConfig) -> bool:
        keep = {"replicas", "replica_selector", "tokenizer_dir"}
        return self.config.model_dump(include=keep) == config.model_dump(include=keep)

    async def aclose(self) -> None:
        await self.pool.stop_probing()
        if self.scraper is not None:
            await self.scraper.stop()
        if self.subscriber is not None:
            await self.subscriber.aclose()
