"""Console sessions: the admin token, given once at the login form, becomes a signed cookie.

The cookie (:data:`COOKIE`) is ``base64url(payload) "." base64url(HMAC-SHA256(key, payload))``
with ``key = HMAC-SHA256(admin token, "switchyard-console-session-v1")`` and a JSON payload of
the operator's name (who made each change), the expiry (unix seconds), a random CSRF token and a
random session id.

- Signed, not stored: every gateway process holding the same admin token accepts the cookie;
  rotating the token ends every session (the key changes), and an unset token accepts none.
- Revocable: logging out revokes the session id in the fleet for the session's remaining
  lifetime (:meth:`~gateway.fleet.base.Fleet.revoke_session`), so a copy of the cookie is refused
  by every gateway process afterwards; the console's guard asks the fleet on every request
  (:func:`gateway.console.web.session_of`). A cookie without a session id (issued before ids
  existed) does not read.
- The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no page of another site
  sends it), ``Path=/ui``, and ``Secure`` when the console is reached over https.
- CSRF: every write must carry the session's CSRF token, in the ``X-CSRF-Token`` header (htmx
  sends it on every request, from ``hx-headers`` on the page body) or a ``csrf`` form field;
  compared in constant time. ``SameSite=Strict`` already keeps another site's requests
  cookieless; the token is the second lock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass
from typing import Final

COOKIE: Final = "switchyard_console"
CSRF_HEADER: Final = "x-csrf-token"
CSRF_FIELD: Final = "csrf"
_KEY_CONTEXT: Final = b"switchyard-console-session-v1"
MAX_OPERATOR_CHARS: Final = 64


@dataclass(frozen=True, slots=True)
class Session:
    operator: str
    expires: float  # unix seconds
    csrf: str
    sid: str  # what a logout revokes

    def remaining_s(self, now: float) -> float:
        """How long the cookie would still be accepted (unrevoked)."""
        return max(0.0, self.expires - now)


def _key(admin_token: str) -> bytes:
    return hmac.new(admin_token.encode(), _KEY_CONTEXT, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def issue(admin_token: str, operator: str, ttl_s: float, now: float) -> tuple[Session, str]:
    """A new session for ``operator`` and its cookie value."""
    session = Session(
        operator[:MAX_OPERATOR_CHARS],
        now + ttl_s,
        secrets.token_urlsafe(24),
        secrets.token_urlsafe(18),
    )
    payload = json.dumps(
        {"op": session.operator, "exp": session.expires, "csrf": session.csrf, "sid": session.sid},
        separators=(",", ":"),
    ).encode()
    signature = hmac.new(_key(admin_token), payload, hashlib.sha256).digest()
    return session, f"{_b64(payload)}.{_b64(signature)}"


def read(admin_token: str, cookie: str | None, now: float) -> Session | None:
    """The session in ``cookie`` when its signature holds and it has not expired."""
    if not cookie or not admin_token or "." not in cookie:
        return None
    body, _, signature = cookie.partition(".")
    try:
        payload, presented = _unb64(body), _unb64(signature)
    except ValueError:
        return None
    expected = hmac.new(_key(admin_token), payload, hashlib.sha256).digest()
    if not hmac.compare_digest(presented, expected):
        return None
    try:
        data = json.loads(payload)
        session = Session(str(data["op"]), float(data["exp"]), str(data["csrf"]), str(data["sid"]))
    except (ValueError, KeyError, TypeError):
        return None
    return session if session.expires > now else None


def csrf_matches(session: Session, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(
        session.csrf.encode(), (presented or "").encode()
    )
