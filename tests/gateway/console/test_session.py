"""The console's session cookie: signed with the admin token, expiring, carrying its CSRF token."""

from __future__ import annotations

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
