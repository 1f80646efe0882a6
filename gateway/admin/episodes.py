"""Admin API for episodes: an agent's whole trajectory rebuilt from the record, and its export.

- ``GET /admin/episodes/{episode_id}``: the episode (:func:`traffic.export.episode_view`):
  each step's route target and kind (local or frontier), served model, policy reason, status,
  latency, tokens, cost, answer, tool results and tool-call validity; the whole conversation
  (messages, tool calls, tool results), the tools offered, the verdict from feedback and its
  reward, and whether the trajectory checks out (``consistent``, ``problems``). 404 when no
  inference carries that episode id. Episode ids as recorded: our header's value,
  ``claude-code:<session>``, ``cache-key:<prompt_cache_key>`` (``gateway.routing.episode_id``).
- ``POST /admin/episodes/export`` with ``{"query": <traffic filter>, "export":
  EpisodeExportConfig}``: every episode with an inference the filter selects, rebuilt from all
  its inferences, written as ``episode_sft`` (TRL conversational with tools) or ``episode_rl``
  records; answers the manifest.

Both are routes of the admin router (:mod:`gateway.admin.router`: the admin token, typed
models). A step is ``local`` when its route target is a ``kind: vllm`` back-end of the running
config.
"""

from __future__ import annotations

from fastapi import APIRouter

from gateway.admin.dependencies import AdminState, Store
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.models import EpisodeExportRequest, EpisodeView
from gateway.config import SwitchyardConfig
from gateway.errors import NotFoundError
from traffic.export import (
    TRAFFIC_QUERY,
    EpisodeExportManifest,
    RouteKinds,
    episode_view,
    export_episodes_from_store,
    load_episode,
)


def route_kinds(config: SwitchyardConfig) -> RouteKinds:
    """Local targets are the config's ``kind: vllm`` back-ends."""
    local = frozenset(name for name, bc in config.backends.items() if bc.kind == "vllm")
    return RouteKinds(local=local)


async def get_episode(episode_id: str, state: AdminState, handle: Store) -> EpisodeView:
    """The episode rebuilt from every inference that carries its id (404: none does)."""
    episode = await load_episode(
        handle.backend, episode_id, legacy=LIVE_TRANSLATOR, routes=route_kinds(state.config)
    )
    if episode is None:
        raise NotFoundError(f"no inference in episode {episode_id[:200]}", code="not_found")
    return EpisodeView.model_validate(episode_view(episode))


async def export_episodes(
    state: AdminState, handle: Store, body: EpisodeExportRequest
) -> EpisodeExportManifest:
    """Export every episode the filter touches as SFT or RL records; answers the manifest."""
    return await export_episodes_from_store(
        handle.backend,
        body.query,
        body.export,
        filters=TRAFFIC_QUERY.dump_python(body.query, mode="json"),
        legacy=LIVE_TRANSLATOR,
        routes=route_kinds(state.config),
    )


def add_routes(router: APIRouter) -> None:
    """The episode routes, on the admin router."""
    router.add_api_route("/episodes/export", export_episodes, methods=["POST"])
    router.add_api_route("/episodes/{episode_id}", get_episode, methods=["GET"])
