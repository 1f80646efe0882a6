"""The console's routes under ``/ui`` and its long-lived parts (templates, weight-swap jobs).

``create_app`` builds one :class:`Console`, adds :meth:`Console.routes` to the app's routes,
keeps it as ``app.state.console``, starts it with the app (the roll-ups' background task) and
closes it at shutdown (a swap still running is stopped).
Static assets (``/ui/static``: the bundled htmx, Chart.js and Pico CSS with their licences, and
the console's own script and style) are public; every other route is guarded
(:func:`gateway.console.web.guarded`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from gateway.background import LeasedLoop
from gateway.console.figures import roll_up_now
from gateway.console.pages import (
    flywheel,
    history,
    keys,
    login,
    models,
    overview,
    routing,
    traffic,
)
from gateway.console.swap_jobs import SwapJobs
from gateway.console.web import PREFIX, Handler, build_templates, guarded
from gateway.recording.handle import RecorderHandle
from gateway.state import GatewayState
from traffic.store import StoreBackend, StoreError

STATIC_DIR: Final = Path(__file__).parent / "static"


async def _home(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/overview", 303)


class Console:
    """What the console keeps between requests."""

    def __init__(self) -> None:
        self.templates = build_templates()
        self.swaps = SwapJobs()
        self.rollups = LeasedLoop("roll-up", (StoreError,))

    def start(self, app: Starlette) -> None:
        """Start rolling up the record's closed hours (once the app's state is built)."""
        state: GatewayState = app.state.switchyard

        def store() -> StoreBackend | None:
            handle: RecorderHandle | None = app.state.recorder
            return handle.backend if handle is not None else None

        async def roll() -> None:
            backend = store()
            if backend is not None:
                await roll_up_now(backend, state.config.console.class_tag)

        self.rollups.start(
            roll,
            lambda: state.config.console.rollup_interval_s,
            lambda lease_s: state.reloader.fleet.lead("console-rollup", lease_s),
            ready=lambda: store() is not None,
        )

    def routes(self) -> list[BaseRoute]:
        def get(path: str, handler: Handler) -> Route:
            return Route(PREFIX + path, guarded(handler), methods=["GET"])

        def post(path: str, handler: Handler) -> Route:
            return Route(PREFIX + path, guarded(handler, write=True), methods=["POST"])

        return [
            Mount(PREFIX + "/static", StaticFiles(directory=STATIC_DIR), name="console-static"),
            Route(PREFIX, _home, methods=["GET"]),
            Route(PREFIX + "/", _home, methods=["GET"]),
            Route(PREFIX + "/login", login.login_form, methods=["GET"]),
            Route(PREFIX + "/login", login.login, methods=["POST"]),
            post("/logout", login.logout),
            get("/overview", overview.overview),
            get("/traffic", traffic.search_page),
            get("/traffic/{inference_id}", traffic.exchange_page),
            get("/episodes/{episode_id}", traffic.episode_page),
            get("/routing", routing.routing_page),
            post("/routing/preview", routing.preview),
            post("/routing/canary", routing.canary),
            post("/routing/promote", routing.promote),
            post("/routing/rollback", routing.rollback),
            post("/routing/pause", routing.pause),
            post("/routing/resume", routing.resume),
            get("/models", models.models_page),
            get("/models/swap", models.swap_status),
            post("/models/drain", models.drain),
            post("/models/undrain", models.undrain),
            post("/models/publish", models.publish),
            post("/models/rollback", models.rollback),
            get("/flywheel", flywheel.flywheel_page),
            get("/flywheel/{run}/rounds/{round}", flywheel.round_page),
            get("/keys", keys.keys_page),
            post("/keys", keys.create),
            post("/keys/{key_id}/revoke", keys.revoke),
            post("/keys/{key_id}/consent", keys.set_consent),
            post("/teams", keys.set_team),
            get("/history", history.history_page),
        ]

    async def aclose(self) -> None:
        await self.rollups.aclose()
        await self.swaps.aclose()
