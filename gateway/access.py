"""The admin credential: who may use the admin API and the ops console.

The credential is read from the environment variable ``gateway.admin_token_env`` names; while
it is unset, admin and console are off. Wrong credentials are throttled per client address
(:mod:`gateway.auth.login_throttle`): :func:`check_admin_token` refuses a throttled address with
429 before comparing (a right token is refused too) and counts a wrong one. The admin API, the
console's login form and its bearer header all go through it; :func:`require_admin` is the admin
API's FastAPI dependency (throttle, then credential).
"""

from __future__ import annotations

import hmac
import os

from starlette.requests import Request

from gateway.auth.login_throttle import Surface
from gateway.errors import AuthenticationError, PermissionDeniedError
from gateway.state import GatewayState


def admin_token(state: GatewayState) -> str | None:
    """The admin credential (None when its environment variable is unset: admin is off)."""
    return os.environ.get(state.config.gateway.admin_token_env) or None


def token_matches(expected: str | None, presented: str | None) -> bool:
    """Whether ``presented`` is the admin credential ``expected`` (constant-time compare)."""
    if not expected or not presented:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def client_address(request: Request) -> str:
    """The address wrong tokens are counted by: the peer the server saw (a trusted proxy's
    ``X-Forwarded-For`` client when the server is told to trust it)."""
    return request.client.host if request.client is not None else "unknown"


async def check_admin_token(
    request: Request, state: GatewayState, surface: Surface, presented: str | None
) -> bool:
    """Whether ``presented`` is the admin credential, throttled per client address: raises
    :class:`~gateway.errors.RateLimitedError` while the address is throttled (before comparing,
    so a right token is refused too) and counts a wrong one. A request that presents nothing is
    checked against the throttle but counts as no guess. False when admin is off (no throttle)."""
    expected = admin_token(state)
    throttle = state.login_throttle
    if not expected or throttle is None:
        return token_matches(expected, presented)
    address = client_address(request)
    await throttle.check(address, surface)
    if token_matches(expected, presented):
        return True
    if presented:
        await throttle.record_failure(address, surface)
    return False


def bearer_token(request: Request) -> str:
    """The ``Authorization: Bearer`` credential ('' when none)."""
    return request.headers.get("authorization", "").removeprefix("Bearer ").strip()


# The request state's key under which a request that require_admin passed keeps the state.
_ADMIN_PASSED = "switchyard_admin"


async def require_admin(request: Request) -> GatewayState:
    """The admin API's guard, a FastAPI dependency of every ``/admin`` route: the wrong-token
    throttle first (:func:`check_admin_token`, surface ``admin_api``: 429 with ``Retry-After``
    while the address is throttled, a wrong token counted), then the credential
    (:func:`check_admin`: 403 while admin is off, 401 for a wrong or missing token). Returns the
    gateway's state. Checks once a request: a request it passed carries that state (a route
    whose body FastAPI would read before any dependency calls it first, FastAPI again)."""
    passed = getattr(request.state, _ADMIN_PASSED, None)
    if isinstance(passed, GatewayState):
        return passed
    state: GatewayState = request.app.state.switchyard
    await check_admin_token(request, state, "admin_api", bearer_token(request))
    checked = check_admin(request)
    setattr(request.state, _ADMIN_PASSED, checked)
    return checked


def check_admin(request: Request) -> GatewayState:
    """The gateway's state when ``request`` carries the admin credential; raises
    :class:`~gateway.errors.PermissionDeniedError` while admin is off (403
    ``admin_disabled``) and :class:`~gateway.errors.AuthenticationError` otherwise (401)."""
    state: GatewayState = request.app.state.switchyard
    expected = admin_token(state)
    if not expected:
        raise PermissionDeniedError(
            f"admin API disabled: set {state.config.gateway.admin_token_env}",
            code="admin_disabled",
        )
    if not _token_matches(request, expected):
        raise AuthenticationError("invalid admin credential")
    return state


def is_admin(request: Request) -> bool:
    """Whether the request carries the admin credential (False when the admin API is off)."""
    state: GatewayState = request.app.state.switchyard
    expected = admin_token(state)
    return bool(expected) and _token_matches(request, expected or "")


def _token_matches(request: Request, expected: str) -> bool:
    return token_matches(expected, bearer_token(request))
