"""Wrong admin tokens are throttled per client address: the sixth within a minute, and every
attempt after it (the right token too), gets 429 with Retry-After, in the shape of the door it
came through (the login page, the console's JSON/htmx/page answers, the admin API's JSON).

Each test speaks from an address of its own (``X-Forwarded-For`` from loopback, which uvicorn
trusts by default), so the shared site's own address is never throttled for the other tests.
"""

from __future__ import annotations

import logging
import re

import httpx
import pytest

from gateway.auth.login_throttle import THROTTLED_CODE
from gateway.console import session
from tests.gateway.console.site import ADMIN_TOKEN, OPERATOR, Site

FAILURES = "switchyard_admin_auth_failures_total"
THROTTLED = "switchyard_admin_auth_throttled_total"


def _from(address: str) -> dict[str, str]:
    return {"x-forwarded-for": address}


def _metric(site: Site, name: str, surface: str) -> float:
    text = httpx.get(site.url + "/metrics").text
    found = re.search(rf'^{name}{{surface="{surface}"}} ([0-9.e+]+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def _retry_after(answer: httpx.Response) -> int:
    value = int(answer.headers["retry-after"])
    assert 1 <= value <= 12  # one of five failures drains every 60 / 5 s
    return value


def test_the_login_form_refuses_the_sixth_wrong_token_and_then_the_right_one(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    address = "203.0.113.10"
    failures, throttled = _metric(site, FAILURES, "login"), _metric(site, THROTTLED, "login")
    with (
        caplog.at_level(logging.WARNING, logger="gateway.auth.login_throttle"),
        httpx.Client(base_url=site.url, headers=_from(address)) as client,
    ):
        for i in range(5):
            wrong = client.post("/ui/login", data={"operator": "eve", "token": f"guess-{i}"})
            assert wrong.status_code == 401, i
        sixth = client.post("/ui/login", data={"operator": "eve", "token": "guess-5"})
        assert sixth.status_code == 429
        _retry_after(sixth)
        assert 'name="token"' in sixth.text and "Too many wrong admin tokens" in sixth.text
        right = client.post("/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN})
        assert right.status_code == 429
        _retry_after(right)
        assert session.COOKIE not in right.headers.get("set-cookie", "")
    assert _metric(site, FAILURES, "login") == failures + 5  # the refused ones were not compared
    assert _metric(site, THROTTLED, "login") == throttled + 2
    started = [
        r
        for r in caplog.records
        if r.name == "gateway.auth.login_throttle" and address in r.getMessage()
    ]
    assert len(started) == 1 and started[0].levelno == logging.WARNING
    other = httpx.post(
        site.url + "/ui/login",
        data={"operator": OPERATOR, "token": ADMIN_TOKEN},
        headers=_from("203.0.113.11"),
    )
    assert other.status_code == 303 and session.COOKIE in other.headers["set-cookie"]


def test_the_console_bearer_header_is_throttled_in_each_clients_shape(site: Site) -> None:
    address = "203.0.113.20"
    failures = _metric(site, FAILURES, "console_bearer")
    as_json = {**_from(address), "accept": "application/json"}
    for i in range(5):
        wrong = httpx.get(
            site.url + "/ui/history", headers={**as_json, "authorization": f"Bearer guess-{i}"}
        )
        assert wrong.status_code == 401, i
    right = {**_from(address), "authorization": f"Bearer {ADMIN_TOKEN}"}
    refused = httpx.get(site.url + "/ui/history", headers={**right, "accept": "application/json"})
    assert refused.status_code == 429
    _retry_after(refused)
    error = refused.json()["error"]
    assert error["type"] == "rate_limit_error" and error["code"] == THROTTLED_CODE
    htmx = httpx.get(site.url + "/ui/models/swap", headers={**right, "hx-request": "true"})
    assert htmx.status_code == 429 and "error-box" in htmx.text and "<html" not in htmx.text
    _retry_after(htmx)
    page = httpx.get(site.url + "/ui/history", headers=right)
    assert page.status_code == 429 and "Too many wrong admin tokens" in page.text
    _retry_after(page)
    assert _metric(site, FAILURES, "console_bearer") == failures + 5
    elsewhere = {**right, **_from("203.0.113.21")}
    assert httpx.get(site.url + "/ui/history", headers=elsewhere).status_code == 200


def test_the_admin_api_answers_the_sixth_wrong_token_with_429_in_its_json_shape(
    site: Site,
) -> None:
    address = "203.0.113.30"
    failures = _metric(site, FAILURES, "admin_api")
    for i in range(5):
        wrong = httpx.get(
            site.url + "/admin/routing",
            headers={**_from(address), "authorization": f"Bearer guess-{i}"},
        )
        assert wrong.status_code == 401, i
    right = {**_from(address), "authorization": f"Bearer {ADMIN_TOKEN}"}
    for path in ("/admin/routing", "/admin/fleet", "/admin/episodes/none"):  # every admin route
        refused = httpx.get(site.url + path, headers=right)
        assert refused.status_code == 429, path
        _retry_after(refused)
        error = refused.json()["error"]
        assert error["type"] == "rate_limit_error" and error["code"] == THROTTLED_CODE
    assert _metric(site, FAILURES, "admin_api") == failures + 5
    assert _metric(site, THROTTLED, "admin_api") >= 3
    elsewhere = {**right, **_from("203.0.113.31")}
    assert httpx.get(site.url + "/admin/routing", headers=elsewhere).status_code == 200


def test_a_session_cookie_is_no_attempt_and_is_not_throttled(site: Site) -> None:
    address = "203.0.113.40"
    with httpx.Client(base_url=site.url, headers=_from(address)) as client:
        logged_in = client.post("/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN})
        assert logged_in.status_code == 303
        for i in range(6):
            client.get("/ui/history", headers={"authorization": f"Bearer guess-{i}"})
        assert client.get("/ui/history").status_code == 200  # the operator's own session
