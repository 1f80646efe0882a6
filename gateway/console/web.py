"""What every console page shares: the guard (session or admin token, CSRF on writes), the
request context a page handler gets, template rendering and the mapping of errors to pages.

A page handler is ``async (Ctx) -> Response``; :func:`guarded` wraps it into a Starlette
endpoint that answers, before the handler runs:

- no admin token configured: 403, the console is off like the admin API;
- an ``Authorization: Bearer`` header is the request's credential (a cookie beside it is not
  read): the admin token lets it in, a wrong one counts against its address and is refused
  like a missing login; too many wrong ones from one address: 429 with ``Retry-After``
  (:mod:`gateway.auth.login_throttle`);
- otherwise the session cookie: valid when its signature (the admin token's key) holds, it has
  not expired and it was not revoked by a logout anywhere in the fleet
  (:meth:`~gateway.fleet.base.Fleet.session_revoked`). When the fleet cannot say (Redis
  unreachable) every cookie session fails closed: 503 "sessions cannot be checked", until Redis
  answers again; the bearer header keeps working;
- neither: a browser navigation is redirected (303) to ``/ui/login?next=...``; an htmx request
  gets 401 with ``HX-Redirect`` to the login; a JSON client (``Accept: application/json``) gets
  401 in the gateway's error shape. No admin data is rendered without the credential;
- a write (POST) with a session but without its CSRF token: 403. A bearer-token write needs no
  CSRF token: browsers never attach that header on their own.

Refusals other than a missing login (403, 429, 503) answer a JSON client in the gateway's error
shape, an htmx request with the error fragment and a browser with the error page, each with the
error's headers (``Retry-After``).

Errors of the handler: :class:`~gateway.errors.GatewayError` renders its status and message
(a fragment for htmx, a page otherwise); :class:`~traffic.store.StoreError` is a 503 "store
unavailable". Every answer carries ``Cache-Control: no-store``, a Content-Security-Policy
allowing only the console's own scripts (no inline script; the bundled assets need no network)
and ``Server-Timing: app;dur=<ms>`` (the benchmark reads it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, quote

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from gateway.access import admin_token, bearer_token, check_admin_token
from gateway.config import ConsoleConfig
from gateway.console import session as sessions
from gateway.console.windows import BUCKET_SECONDS, WINDOW_SECONDS
from gateway.doors.skeleton import read_body
from gateway.errors import (
    AuthenticationError,
    GatewayError,
    InvalidRequestError,
    PermissionDeniedError,
    ServiceUnavailableError,
    error_body,
)
from gateway.recording.handle import RecorderHandle
from gateway.state import GatewayState
from traffic.store import StoreBackend, StoreError
from traffic.store.console_queries import Window

log = logging.getLogger(__name__)

PREFIX: Final = "/ui"
FORM_LIMIT: Final = 1024 * 1024
BEARER_OPERATOR: Final = "admin-token"  # who a change is by when made with the bearer token
OPERATOR_HEADER: Final = "x-switchyard-operator"
TEMPLATES_DIR: Final = Path(__file__).parent / "templates"
NONE: Final = "-"  # how a figure without data shows
SECURITY_HEADERS: Final = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
}


def build_templates() -> Jinja2Templates:
    """The console's Jinja2 templates (autoescaped) with its number formats as filters."""
    templates = Jinja2Templates(directory=TEMPLATES_DIR)
    env = templates.env
    env.filters["pct"] = lambda v, d=1: NONE if v is None else f"{100 * v:.{d}f}%"
    env.filters["usd"] = lambda v, d=4: NONE if v is None else f"${v:,.{d}f}"
    env.filters["ms"] = lambda v: NONE if v is None else f"{v:,.0f} ms"
    env.filters["num"] = lambda v, d=0: NONE if v is None else f"{v:,.{d}f}"
    env.filters["when"] = lambda v: NONE if v is None else v.strftime("%Y-%m-%d %H:%M:%S")
    env.filters["json"] = lambda v: orjson.dumps(v, option=orjson.OPT_INDENT_2).decode()
    env.filters["jsattr"] = lambda v: orjson.dumps(v).decode()
    return templates


@dataclass(frozen=True, slots=True)
class Ctx:
    """One console request: who asks, the gateway's state, and rendering."""

    request: Request
    state: GatewayState
    templates: Jinja2Templates
    operator: str
    session: sessions.Session | None  # None: the admin token came as a bearer header
    fields: tuple[tuple[str, str], ...] = ()  # a write's url-encoded form, in order

    @property
    def config(self) -> ConsoleConfig:
        return self.state.config.console

    @property
    def handle(self) -> RecorderHandle | None:
        handle: RecorderHandle | None = self.request.app.state.recorder
        return handle

    @property
    def store(self) -> StoreBackend:
        """The traffic store (a 404 page when ``store.enabled`` is false)."""
        if self.handle is None:
            raise InvalidRequestError("the traffic store is off (store.enabled: false)")
        return self.handle.backend

    @property
    def htmx(self) -> bool:
        return self.request.headers.get("hx-request") == "true"

    def param(self, name: str) -> str | None:
        value = self.request.query_params.get(name, "").strip()
        if "\x00" in value:  # nothing stored holds one on PostgreSQL; a 400, not a store error
            raise InvalidRequestError(f"?{name}= cannot contain a NUL character")
        return value or None

    def window(self) -> tuple[str, Window, int]:
        """The window the page shows (``?window=24h``), ending now, and its chart bucket."""
        name = self.param("window") or self.config.window
        if name not in WINDOW_SECONDS:
            raise InvalidRequestError(f"window must be one of {sorted(WINDOW_SECONDS)}")
        until = datetime.now(UTC) + timedelta(seconds=1)
        return (
            name,
            Window(until - timedelta(seconds=WINDOW_SECONDS[name]), until),
            BUCKET_SECONDS[name],
        )

    def local_targets(self) -> list[str]:
        return [n for n, b in self.state.config.backends.items() if b.kind == "vllm"]

    def render(self, template: str, status: int = 200, **values: Any) -> Response:
        values.update(
            operator=self.operator,
            csrf=self.session.csrf if self.session else "",
            prefix=PREFIX,
            path=self.request.url.path,
        )
        return self.templates.TemplateResponse(
            self.request, template, values, status_code=status, headers=SECURITY_HEADERS
        )

    def form(self) -> dict[str, str]:
        """A write's form fields (the last value of a repeated field)."""
        return dict(self.fields)

    def form_list(self, name: str) -> list[str]:
        """Every value of a repeated form field, in order."""
        return [v for k, v in self.fields if k == name]


Handler = Callable[[Ctx], Awaitable[Response]]


async def session_of(request: Request, state: GatewayState) -> sessions.Session | None:
    """The request's session: signed with the admin token, unexpired, not revoked in the fleet.
    ServiceUnavailableError when the fleet cannot say whether it was revoked (fail closed)."""
    found = sessions.read(
        admin_token(state) or "", request.cookies.get(sessions.COOKIE), time.time()
    )
    if found is None:
        return None
    try:
        revoked = await state.reloader.fleet.session_revoked(found.sid)
    except ServiceUnavailableError as exc:
        # Not logged here: the fleet logs an outage once, this would log every request.
        raise ServiceUnavailableError(
            "Console sessions cannot be checked right now: the fleet's shared state (Redis) is "
            "unreachable, so no session is accepted until it is back. Scripts may use the admin "
            "token as a bearer header meanwhile.",
            code="sessions_unavailable",
        ) from exc
    return None if revoked else found


async def _who(request: Request, state: GatewayState) -> tuple[str, sessions.Session | None]:
    """The operator and their session; raises when neither a session nor the token is here."""
    if not admin_token(state):
        raise PermissionDeniedError(
            f"console disabled: set {state.config.gateway.admin_token_env}", code="admin_disabled"
        )
    bearer = bearer_token(request)
    if bearer:
        if await check_admin_token(request, state, "console_bearer", bearer):
            return request.headers.get(OPERATOR_HEADER) or BEARER_OPERATOR, None
        raise AuthenticationError("wrong admin token")
    found = await session_of(request, state)
    if found is not None:
        return found.operator, found
    raise AuthenticationError("log in to the console with the admin token")


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


def refusal(templates: Jinja2Templates, request: Request, exc: GatewayError) -> Response:
    """``exc`` as a JSON client, an htmx request or a browser expects it, with its headers."""
    if _wants_json(request):
        body = error_body(exc.message, exc.error_type, exc.param, exc.code)
        headers = {**SECURITY_HEADERS, **exc.headers()}
        return Response(orjson.dumps(body), exc.status, headers, "application/json")
    return error_page(templates, request, exc.status, exc.message, exc.headers())


def _login_answer(request: Request, exc: AuthenticationError) -> Response:
    target = f"{PREFIX}/login?next={quote(request.url.path)}"
    if _wants_json(request):
        body = error_body(exc.message, exc.error_type, None, exc.code)
        return Response(orjson.dumps(body), 401, SECURITY_HEADERS, "application/json")
    if request.headers.get("hx-request") == "true" or request.method != "GET":
        headers = {**SECURITY_HEADERS, "hx-redirect": target}
        return HTMLResponse("<p class=error>Log in again.</p>", 401, headers)
    return RedirectResponse(target, 303, SECURITY_HEADERS)


def error_page(
    templates: Jinja2Templates,
    request: Request,
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
) -> Response:
    name = "fragments/error.html" if request.headers.get("hx-request") == "true" else "error.html"
    return templates.TemplateResponse(
        request,
        name,
        {"status": status, "message": message, "prefix": PREFIX, "operator": "", "csrf": ""},
        status_code=status,
        headers={**SECURITY_HEADERS, **(headers or {})},
    )


def guarded(handler: Handler, *, write: bool = False) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint for ``handler``; ``write``: a POST that needs the CSRF token."""

    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        response = await _answer(request)
        ms = (time.perf_counter() - started) * 1000
        response.headers["server-timing"] = f"app;dur={ms:.1f}"
        return response

    async def _answer(request: Request) -> Response:
        state: GatewayState = request.app.state.switchyard
        templates: Jinja2Templates = request.app.state.console.templates
        try:
            operator, found = await _who(request, state)
        except AuthenticationError as exc:
            return _login_answer(request, exc)
        except GatewayError as exc:  # 403 console off, 429 throttled, 503 sessions unknown
            return refusal(templates, request, exc)
        try:
            fields: tuple[tuple[str, str], ...] = ()
            if write:
                raw = await read_body(request, FORM_LIMIT)
                fields = tuple(parse_qsl(raw.decode(errors="replace"), keep_blank_values=True))
                presented = request.headers.get(sessions.CSRF_HEADER)
                if presented is None:
                    presented = dict(fields).get(sessions.CSRF_FIELD)
                if found is not None and not sessions.csrf_matches(found, presented):
                    raise PermissionDeniedError("CSRF token missing or wrong: reload the page")
            return await handler(Ctx(request, state, templates, operator, found, fields))
        except GatewayError as exc:
            return error_page(templates, request, exc.status, exc.message)
        except StoreError as exc:
            log.warning("console: store error on %s: %s", request.url.path, exc)
            return error_page(templates, request, 503, f"the traffic store is unavailable: {exc}")

    return endpoint
