"""litellm imported once, on a thread of its own, after the gateway started.

Importing litellm costs seconds of CPU and much memory (it imports the OpenAI SDK's types and
every provider: docs/hot_path.md). Nothing on the gateway's start path or hot path needs it:
OpenAI- and Anthropic-format providers are called directly
(:mod:`gateway.backends.provider_routes`) and prices come from litellm's price map read as data
(:mod:`gateway.backends.pricing`). litellm still translates for every other provider and format
pair; those calls await the import, which began when the gateway started (never because a
request came).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import logging
import os
import threading
import time
from types import ModuleType

log = logging.getLogger(__name__)

LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


def import_litellm() -> ModuleType:
    """Import litellm offline and quiet (blocking: seconds)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.drop_params = True
    # litellm logs an INFO line per call through its own handler and again through the root
    # logger's: warnings only, once, through its handler.
    for name in LITELLM_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        logger.propagate = False
    return litellm


class LitellmLoader:
    """The litellm module, once its background import finished."""

    def __init__(self) -> None:
        self._future: concurrent.futures.Future[ModuleType] = concurrent.futures.Future()
        self._started = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Begin the import on a daemon thread (idempotent)."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._load, name="litellm-import", daemon=True).start()

    def _load(self) -> None:
        t0 = time.perf_counter()
        try:
            module = import_litellm()
        except BaseException as exc:  # handed to every awaiting caller
            log.exception("importing litellm failed")
            self._future.set_exception(exc)
            return
        # Its ~300k objects never die: out of the collector's generations, as the gateway's own
        # start-up objects are (see gateway.app), so full collections stay short.
        gc.freeze()
        log.info("litellm imported in %.2f s (in the background)", time.perf_counter() - t0)
        self._future.set_result(module)

    @property
    def module(self) -> ModuleType | None:
        """litellm if its import finished, else None."""
        if self._future.done() and self._future.exception() is None:
            return self._future.result()
        return None

    async def get(self) -> ModuleType:
        """litellm, awaiting the import begun at start-up (started now if it was not)."""
        self.start()
        return await asyncio.wrap_future(self._future)

    def load_now(self) -> ModuleType:
        """litellm, importing it on this thread if needed (blocking: tools and tests)."""
        self.start()
        return self._future.result()
