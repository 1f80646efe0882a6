"""A console session ends for good: a logged-out cookie presented again, or one signed with an
admin token the gateway no longer has, gets the login page; with the fleet's Redis unreachable
cookie sessions fail closed (503) while the bearer token keeps working.

The same logout seen by another gateway process of a Redis fleet is in
``tests/gateway/fleet/test_console_sessions.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway.console import session
from gateway.errors import ServiceUnavailableError
from gateway.fleet.base import LocalFleet
from serving.names import ADMIN_TOKEN_ENV
from tests.fixtures.gateway_fixture import GatewayThread, gateway_config
from tests.gateway.console.site import ADMIN_TOKEN, OPERATOR, Site, admin_token

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"


def _login(client: httpx.Client) -> tuple[str, str]:
    """Log ``client`` in; its cookie value and CSRF token."""
    answer = client.post("/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN})
    assert answer.status_code == 303
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/keys").text)
    assert csrf is not None
    return client.cookies[session.COOKIE], csrf.group(1)


def test_a_logged_out_cookie_presented_again_gets_the_login_page(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client, httpx.Client(base_url=site.url) as other:
        cookie, csrf = _login(client)
        _login(other)  # another session of the same operator
        out = client.post("/ui/logout", data={"csrf": csrf})
        assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert 'switchyard_console=""' in out.headers["set-cookie"]
        assert other.get("/ui/keys").status_code == 200  # only the one logged out ends
    stolen = {session.COOKIE: cookie}  # a copy kept from before the logout
    again = httpx.get(site.url + "/ui/keys", cookies=stolen)
    assert again.status_code == 303 and again.headers["location"] == "/ui/login?next=/ui/keys"
    assert "ide-team-a" not in again.text
    as_json = httpx.get(
        site.url + "/ui/keys", cookies=stolen, headers={"accept": "application/json"}
    )
    assert as_json.status_code == 401
    write = httpx.post(site.url + "/ui/keys", cookies=stolen, data={"name": "x", "csrf": csrf})
    assert write.status_code == 401


def test_a_cookie_issued_under_another_admin_token_gets_the_login_page(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway now holds token B (as after a restart with a rotated token): token A's
    cookie is refused, token B logs in."""
    with httpx.Client(base_url=site.url) as client:
        cookie_a, _ = _login(client)
    monkeypatch.setenv(ADMIN_TOKEN_ENV, "rotated-admin-token-b")
    refused = httpx.get(site.url + "/ui/overview", cookies={session.COOKIE: cookie_a})
    assert refused.status_code == 303
    assert refused.headers["location"] == "/ui/login?next=/ui/overview"
    login_b = httpx.post(
        site.url + "/ui/login", data={"operator": OPERATOR, "token": "rotated-admin-token-b"}
    )
    assert login_b.status_code == 303
    page = httpx.get(site.url + "/ui/history", cookies=login_b.cookies)
    assert page.status_code == 200


class _RevocationsDown(LocalFleet):
    """A fleet whose shared state cannot be written (Redis went away at the logout)."""

    async def revoke_session(self, session_id: str, ttl_s: float) -> None:
        raise ServiceUnavailableError("Redis went away (test).", code="fleet_unavailable")


def test_a_logout_the_fleet_cannot_record_says_so_and_still_ends_the_browsers_cookie(
    site: Site,
) -> None:
    kept = site.gw.state.reloader.fleet
    with httpx.Client(base_url=site.url) as client:
        _, csrf = _login(client)
        site.gw.state.reloader.fleet = _RevocationsDown()
        try:
            out = client.post("/ui/logout", data={"csrf": csrf})
        finally:
            site.gw.state.reloader.fleet = kept
    assert out.status_code == 503 and "could not be revoked on the server" in out.text
    assert 'switchyard_console=""' in out.headers["set-cookie"]


@pytest.fixture
def redis_down(frontier_sim: Any) -> Iterator[GatewayThread]:
    """A gateway of a Redis fleet whose Redis cannot be reached."""
    fleet = {"backend": "redis", "redis_url": UNREACHABLE_REDIS, "name": "down", "timeout_s": 0.2}
    with admin_token(), GatewayThread(gateway_config(frontier_sim.base_url, fleet=fleet)) as gw:
        yield gw


def test_with_the_fleets_redis_down_cookie_sessions_fail_closed_and_the_bearer_works(
    redis_down: GatewayThread,
) -> None:
    url = redis_down.base_url
    login = httpx.post(url + "/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN})
    assert login.status_code == 303  # the login needs no Redis; each request's check does
    page = httpx.get(url + "/ui/routing", cookies=login.cookies)
    assert page.status_code == 503 and "sessions cannot be checked" in page.text
    assert "Live policy" not in page.text
    as_json = httpx.get(
        url + "/ui/routing", cookies=login.cookies, headers={"accept": "application/json"}
    )
    assert as_json.status_code == 503
    assert as_json.json()["error"]["code"] == "sessions_unavailable"
    bearer = httpx.get(url + "/ui/routing", headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert bearer.status_code == 200 and "Live policy" in bearer.text
