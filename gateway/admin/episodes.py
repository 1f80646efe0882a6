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

Both need the admin credential (``gateway.admin.api.check_admin``). A step is ``local`` when its
route target is a ``kind: vllm`` back-end of the running config.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.access import check_admin
from gateway.admin.legacy_records import LIVE_TRANSLATOR
from gateway.admin.operations import recorder
from gateway.config import SwitchyardConfig
from gateway.doors.skeleton import read_body
from gateway.errors import (
    MAPPED_ERRORS,
    InvalidRequestError,
    NotFoundError,
    json_error_response,
)
from traffic.export import (
    TRAFFIC_QUERY,
    EpisodeExportConfig,
    RouteKinds,
    episode_view,
    export_episodes_from_store,
    load_episode,
)
from traffic.store import InferenceFilter

EPISODE_BODY_LIMIT = 1024 * 1024


class EpisodeExportRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: InferenceFilter = Field(default_factory=InferenceFilter)
    export: EpisodeExportConfig


def route_kinds(config: SwitchyardConfig) -> RouteKinds:
    """Local targets are the config's ``kind: vllm`` back-ends."""
    local = frozenset(name for name, bc in config.backends.items() if bc.kind == "vllm")
    return RouteKinds(local=local)


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status, media_type="application/json")


async def get_episode(request: Request) -> Response:
    try:
        state = check_admin(request)
        handle = recorder(request)
        episode_id = request.path_params["episode_id"]
        episode = await load_episode(
            handle.backend, episode_id, legacy=LIVE_TRANSLATOR, routes=route_kinds(state.config)
        )
        if episode is None:
            raise NotFoundError(f"no inference in episode {episode_id[:200]}", code="not_found")
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json(episode_view(episode))


async def export_episodes(request: Request) -> Response:
    try:
        state = check_admin(request)
        handle = recorder(request)
        raw = await read_body(request, EPISODE_BODY_LIMIT)
        req = EpisodeExportRequest.model_validate(orjson.loads(raw or b"{}"))
        manifest = await export_episodes_from_store(
            handle.backend,
            req.query,
            req.export,
            filters=TRAFFIC_QUERY.dump_python(req.query, mode="json"),
            legacy=LIVE_TRANSLATOR,
            routes=route_kinds(state.config),
        )
    except (orjson.JSONDecodeError, ValidationError) as exc:
        return json_error_response(InvalidRequestError(f"invalid episode export request: {exc}"))
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    return _json(manifest.model_dump(mode="json"))


def routes() -> list[BaseRoute]:
    return [
        Route("/admin/episodes/export", export_episodes, methods=["POST"]),
        Route("/admin/episodes/{episode_id}", get_episode, methods=["GET"]),
    ]
