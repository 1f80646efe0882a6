"""The console's session cookie: signed with the admin token, expiring, carrying its CSRF token."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

from gateway.console import session

TOKEN = "admin-token-1"


def test_a_session_reads_back_until_it_expires() -> None:
    issued, cookie = session.issue(TOKEN, "ann", 60, now=1000.0)
    assert session.read(TOKEN, cookie, now=1059.0) == issued
    assert session.read(TOKEN, cookie, now=1061.0) is None


def test_a_cookie_is_refused_when_tampered_or_signed_with_another_token() -> None:
    _, cookie = session.issue(TOKEN, "ann", 60, now=0.0)
    body, _, signature = cookie.partition(".")
    _, other = session.issue(TOKEN, "mallory", 60, now=0.0)
    assert session.read(TOKEN, f"{other.partition('.')[0]}.{signature}", now=1.0) is None
    assert session.read("rotated-token", cookie, now=1.0) is None
    assert session.read("", cookie, now=1.0) is None
    for broken in ("", "no-dot", f"{body}.", f"!!.{signature}", f"{body}x.{signature}"):
        assert session.read(TOKEN, broken, now=1.0) is None


def test_the_csrf_token_is_the_sessions_own() -> None:
    mine, _ = session.issue(TOKEN, "ann", 60, now=0.0)
    theirs, _ = session.issue(TOKEN, "ann", 60, now=0.0)
    assert session.csrf_matches(mine, mine.csrf)
    assert not session.csrf_matches(mine, theirs.csrf)
    assert not session.csrf_matches(mine, None)
    assert not session.csrf_matches(mine, "")


def test_each_session_has_an_id_of_its_own_that_a_logout_can_revoke() -> None:
    first, cookie = session.issue(TOKEN, "ann", 60, now=1000.0)
    second, _ = session.issue(TOKEN, "ann", 60, now=1000.0)
    assert first.sid and first.sid != second.sid
    read = session.read(TOKEN, cookie, now=1001.0)
    assert read is not None and read.sid == first.sid
    assert first.remaining_s(1015.0) == 45.0 and first.remaining_s(2000.0) == 0.0


def test_a_cookie_without_a_session_id_does_not_read() -> None:
    """A cookie signed before sessions had ids could never be revoked: it is refused."""
    payload = json.dumps({"op": "ann", "exp": 2000.0, "csrf": "x"}, separators=(",", ":"))
    body = base64.urlsafe_b64encode(payload.encode()).rstrip(b"=").decode()
    key = hmac.new(TOKEN.encode(), b"switchyard-console-session-v1", hashlib.sha256).digest()
    mac = hmac.new(key, payload.encode(), hashlib.sha256).digest()
    signature = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert session.read(TOKEN, f"{body}.{signature}", now=1000.0) is None
