"""Login and logout: the admin token, given once, is exchanged for a signed session cookie.

See :mod:`gateway.console.session` for the cookie and CSRF rules. A failed login answers 401
with the form again (nothing about why beyond "wrong token"); too many wrong tokens from one
address answer 429 with the form, a ``Retry-After`` header and how long to wait, right token or
wrong (:mod:`gateway.auth.login_throttle`); ``next`` only ever points inside the console.

Logout deletes the cookie and revokes its session id in the fleet for the session's remaining
lifetime, so a copy of the cookie opens no page of any gateway process afterwards. When the
fleet cannot be reached (Redis down) the cookie is still deleted in this browser and the answer
is a 503 page saying that the session was not revoked on the server (a copy would be accepted
again once Redis is back, until it expires or the admin token is rotated).
"""

from __future__ import annotations

import logging
import time
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.templating import Jinja2Templates

from gateway.access import admin_token, check_admin_token, client_address
from gateway.console import session as sessions
from gateway.console.web import FORM_LIMIT, PREFIX, SECURITY_HEADERS, Ctx, error_page
from gateway.doors.skeleton import read_body
from gateway.errors import GatewayError, RateLimitedError, ServiceUnavailableError
from gateway.state import GatewayState

log = logging.getLogger(__name__)


def _next(value: str | None) -> str:
    """Where to go after logging in: a console path, never another site."""
    if (
        value
        and value.startswith(PREFIX + "/")
        and not value.startswith("//")
        and "\\" not in value
    ):
        return value
    return f"{PREFIX}/overview"


def _form(
    request: Request,
    templates: Jinja2Templates,
    status: int,
    headers: dict[str, str] | None = None,
    **values: str,
) -> Response:
    state: GatewayState = request.app.state.switchyard
    context = {
        "prefix": PREFIX,
        "operator": "",
        "csrf": "",
        "token_env": state.config.gateway.admin_token_env,
        "next": values.get("next", _next(request.query_params.get("next"))),
        "name": values.get("name", ""),
        "error": values.get("error", ""),
        "page": "login",
    }
    return templates.TemplateResponse(
        request,
        "login.html",
        context,
        status_code=status,
        headers={**SECURITY_HEADERS, **(headers or {})},
    )


async def login_form(request: Request) -> Response:
    templates: Jinja2Templates = request.app.state.console.templates
    state: GatewayState = request.app.state.switchyard
    if not admin_token(state):
        env = state.config.gateway.admin_token_env
        return error_page(templates, request, 403, f"console disabled: set {env}")
    return _form(request, templates, 200)


async def login(request: Request) -> Response:
    templates: Jinja2Templates = request.app.state.console.templates
    state: GatewayState = request.app.state.switchyard
    expected = admin_token(state)
    if not expected:
        env = state.config.gateway.admin_token_env
        return error_page(templates, request, 403, f"console disabled: set {env}")
    try:
        raw = await read_body(request, FORM_LIMIT)
    except GatewayError as exc:
        return error_page(templates, request, exc.status, exc.message)
    fields = dict(parse_qsl(raw.decode(errors="replace")))
    name = fields.get("operator", "").strip()
    target = _next(fields.get("next"))
    try:
        right = await check_admin_token(request, state, "login", fields.get("token"))
    except RateLimitedError as exc:
        return _form(
            request, templates, 429, exc.headers(), next=target, name=name, error=exc.message
        )
    if not name or not right:
        log.warning("console: failed login from %s", client_address(request))
        return _form(
            request, templates, 401, next=target, name=name, error="Wrong admin token or no name."
        )
    ttl = state.config.console.session_ttl_s
    _, cookie = sessions.issue(expected, name, ttl, time.time())
    response = RedirectResponse(target, 303, SECURITY_HEADERS)
    secure = request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"
    response.set_cookie(
        sessions.COOKIE,
        cookie,
        max_age=int(ttl),
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=secure,
    )
    return response


async def logout(ctx: Ctx) -> Response:
    response: Response = RedirectResponse(f"{PREFIX}/login", 303, SECURITY_HEADERS)
    session = ctx.session
    if session is not None:  # None: the bearer token, no session to end
        try:
            await ctx.state.reloader.fleet.revoke_session(
                session.sid, session.remaining_s(time.time())
            )
            log.info("console: %s logged out", session.operator)
        except ServiceUnavailableError as exc:
            until = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(session.expires))
            log.warning("console: logout of %s not revoked: %s", session.operator, exc.message)
            response = error_page(
                ctx.templates,
                ctx.request,
                503,
                "Logged out in this browser, but the session could not be revoked on the server: "
                f"{exc.message} A copy of this session's cookie would be accepted again once "
                f"Redis is back, until {until}; rotate the admin token to end every session.",
            )
    response.delete_cookie(sessions.COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response
