"""The methods a vLLM replica's workers gain for a weight hot swap (:mod:`serving.hotswap`),
called through vLLM's `/collective_rpc` by name; vLLM imports the class by the path in
:data:`RELOAD_WORKER_EXTENSION` (`--worker-extension-cls`).

- `switchyard_reload_ready`: answers the preflight.
- `switchyard_reload(dir)`: vLLM's in-place `reload_weights(weights_path=dir)`, and on CPU the
  MoE prepack vLLM skips on reload.
- `switchyard_clear_kv_connector`: drops every entry of the replica's KV connector's own tier,
  so that no prefix is answered from KV computed with the old weights. vLLM 0.32's
  `reset_prefix_cache?reset_external=true` reaches the connector's `reset_cache()`, which
  LMCache's `LMCacheConnectorV1` does not implement (the base class returns None, counted as
  success: vLLM `kv_connector/v1/base.py`, `Scheduler.reset_connector_cache`). With LMCache
  the worker's `LMCacheEngine.clear()` is called (every storage backend that has a `clear`;
  LMCache skips, with a warning, one that has none: remote and disk tiers, which this project's
  GPU overlay does not configure). Returns the entries removed, -1 without a connector; any
  other connector raises (a swap must fail rather than serve stale KV). The replica is drained
  when it runs: pinned (in-use) objects would survive the clear. Runs only where LMCache is
  installed: on CPU replicas there is no connector (-1, exercised by the hot-swap tests).

Runs inside the vLLM worker process; imports vLLM lazily so this module stays importable
without it.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

#: `VllmLaunchConfig.worker_extension_cls` value that gives a replica the reload method.
RELOAD_WORKER_EXTENSION = "serving.reload_worker.ReloadWorkerExtension"
RELOAD_METHOD = "switchyard_reload"
CLEAR_METHOD = "switchyard_clear_kv_connector"


class _VllmWorker(Protocol):
    model_runner: Any

    def reload_weights(self, *, weights_path: str) -> None: ...


class ReloadWorkerExtension:
    """Methods mixed into vLLM's worker class (module docstring)."""

    def switchyard_reload_ready(self) -> str:
        """Answers the preflight: this worker has the extension."""
        return RELOAD_METHOD

    def switchyard_reload(self, checkpoint_dir: str) -> str:
        """Reload every weight from `checkpoint_dir` in place; returns the directory."""
        from vllm.platforms import current_platform

        worker = cast(_VllmWorker, self)
        worker.reload_weights(weights_path=checkpoint_dir)
        if current_platform.is_cpu():
            # vLLM's reload copies the new expert weights into the prepacked tensors without
            # running the CPU kernel's prepack again (it only runs on first load); run it.
            for module in worker.model_runner.get_model().modules():
                kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
                if kernel is not None:
                    kernel.fused_experts.process_weights_after_loading(module)
        return checkpoint_dir

    def switchyard_clear_kv_connector(self) -> int:
        """Clear the KV connector's tier (module docstring): entries removed, -1 for none."""
        from vllm.distributed.kv_transfer import get_kv_transfer_group, has_kv_transfer_group

        if not has_kv_transfer_group():
            return -1
        connector = get_kv_transfer_group()
        # LMCacheConnectorV1 -> its LMCacheConnectorV1Impl -> the worker's LMCacheEngine
        impl = getattr(connector, "_lmcache_engine", None)
        engine = getattr(impl, "lmcache_engine", None)
        clear = getattr(engine, "clear", None)
        if clear is None:
            raise RuntimeError(
                f"the KV connector {type(connector).__name__} has no cache this replica can "
                "clear after a weight swap: a prefix could be answered from the old weights' KV"
            )
        removed = clear()
        return int(removed) if isinstance(removed, int) else 0
