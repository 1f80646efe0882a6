"""No admin data without the admin token; writes need the session's CSRF token; the console's
assets are bundled. Plain HTTP against the seeded console (the browser tests drive the pages)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.console import session
from tests.gateway.console.site import ADMIN_TOKEN, OPERATOR, Site

PAGES = (
    "/ui/overview",
    "/ui/overview?window=7d&by=decision",
    "/ui/overview?window=1h&by=p_local",
    "/ui/routing",
    "/ui/traffic",
    "/ui/models",
    "/ui/models/swap",
    "/ui/flywheel",
    "/ui/keys",
    "/ui/history",
)
STATIC = Path(__file__).resolve().parents[3] / "gateway" / "console" / "static"


@pytest.fixture
def logged_in(site: Site) -> Iterator[tuple[httpx.Client, str]]:
    """A client with a console session, and the session's CSRF token."""
    with httpx.Client(base_url=site.url) as client:
        answer = client.post(
            "/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN, "next": "/ui/keys"}
        )
        assert answer.status_code == 303 and answer.headers["location"] == "/ui/keys"
        csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/ui/keys").text)
        assert csrf is not None
        yield client, csrf.group(1)


def test_without_the_token_a_browser_is_sent_to_the_login_and_sees_no_data(site: Site) -> None:
    for path in PAGES:
        answer = httpx.get(site.url + path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/ui/login?next=/ui/")
        assert "ide-team-a" not in answer.text and "frontier-openai" not in answer.text
    login = httpx.get(site.url + "/ui/login?next=/ui/keys")
    assert login.status_code == 200 and 'name="token"' in login.text


def test_without_the_token_json_and_htmx_clients_get_401(site: Site) -> None:
    as_json = httpx.get(site.url + "/ui/overview", headers={"accept": "application/json"})
    assert as_json.status_code == 401
    assert as_json.json()["error"]["type"] == "authentication_error"
    htmx = httpx.get(site.url + "/ui/models/swap", headers={"hx-request": "true"})
    assert htmx.status_code == 401 and htmx.headers["hx-redirect"].startswith("/ui/login")


def test_writes_without_the_token_are_refused_and_change_nothing(site: Site) -> None:
    keys_before = len(site.gw.call(site.gw.app.state.recorder.backend.list_api_keys()))
    for path, form in (
        ("/ui/keys", {"name": "intruder"}),
        ("/ui/routing/promote", {}),
        (
            "/ui/models/drain",
            {"target": "local", "replica": site.gw.state.config.backends["local"].replicas[0]},
        ),
    ):
        answer = httpx.post(site.url + path, data=form)
        assert answer.status_code == 401, path
    assert len(site.gw.call(site.gw.app.state.recorder.backend.list_api_keys())) == keys_before
    assert not any(
        r.drained for p in site.gw.state.targets.pools().values() for r in p.replicas.values()
    )


def test_a_wrong_token_or_a_forged_cookie_does_not_log_in(site: Site) -> None:
    wrong = httpx.post(site.url + "/ui/login", data={"operator": "eve", "token": "guess"})
    assert wrong.status_code == 401 and session.COOKIE not in wrong.headers.get("set-cookie", "")
    _, forged = session.issue("another-token", "eve", 600, now=1e12 - 600)
    _, stale = session.issue(ADMIN_TOKEN, "eve", 1, now=0.0)
    for cookie in (forged, stale, "garbage.cookie"):
        answer = httpx.get(site.url + "/ui/keys", cookies={session.COOKIE: cookie})
        assert answer.status_code == 303, cookie


def test_the_session_cookie_is_httponly_strict_and_scoped_to_the_console(site: Site) -> None:
    answer = httpx.post(site.url + "/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN})
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
    page = httpx.get(site.url + "/ui/overview", cookies=answer.cookies)
    assert page.headers["cache-control"] == "no-store"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


def test_a_write_without_the_csrf_token_is_refused(
    site: Site, logged_in: tuple[httpx.Client, str]
) -> None:
    client, csrf = logged_in
    names = {k.name for k in site.gw.call(site.gw.app.state.recorder.backend.list_api_keys())}
    refused = client.post("/ui/keys", data={"name": "csrf-probe"})
    assert refused.status_code == 403 and "CSRF" in refused.text
    wrong = client.post("/ui/keys", data={"name": "csrf-probe", "csrf": csrf + "x"})
    assert wrong.status_code == 403
    keys = site.gw.call(site.gw.app.state.recorder.backend.list_api_keys())
    assert {k.name for k in keys} == names
    made = client.post("/ui/keys", data={"name": "csrf-probe"}, headers={"x-csrf-token": csrf})
    assert made.status_code == 201
    plaintext = re.search(r'id="plaintext">([^<]+)<', made.text)
    assert plaintext is not None and plaintext.group(1).startswith("sy-")
    assert plaintext.group(1) not in client.get("/ui/keys").text  # shown once


def test_the_admin_token_as_a_bearer_header_reads_and_writes_without_csrf(site: Site) -> None:
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}", "x-switchyard-operator": "ci-job"}
    page = httpx.get(site.url + "/ui/overview", headers=headers)
    assert page.status_code == 200 and "Local share" in page.text
    made = httpx.post(site.url + "/ui/keys", data={"name": "made-by-ci"}, headers=headers)
    assert made.status_code == 201
    history = httpx.get(site.url + "/ui/history?kind=key.", headers=headers).text
    assert "ci-job" in history and "key.create" in history


def test_the_assets_are_bundled_with_their_licences_and_nothing_is_loaded_from_elsewhere(
    logged_in: tuple[httpx.Client, str],
) -> None:
    client, _ = logged_in
    for path in (p for p in PAGES if p != "/ui/models/swap"):  # pages, not fragments
        text = client.get(path).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', text)
        assert sources and all(s.startswith(("/ui", "?", "#", "data:")) for s in sources), path
    for asset in ("htmx-2.0.11.min.js", "chart-4.6.1.umd.min.js", "pico-2.1.1.min.css"):
        assert client.get(f"/ui/static/vendor/{asset}").status_code == 200
    licences = {p.name for p in (STATIC / "vendor").iterdir() if "LICENSE" in p.name}
    assert licences == {"htmx.LICENSE", "chart.js.LICENSE.md", "pico.LICENSE.md"}


@pytest.mark.parametrize(
    "target", ["https://evil.example/ui/keys", "//evil.example", "/admin/keys"]
)
def test_the_login_only_sends_back_into_the_console(site: Site, target: str) -> None:
    answer = httpx.post(
        site.url + "/ui/login", data={"operator": OPERATOR, "token": ADMIN_TOKEN, "next": target}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/overview"
