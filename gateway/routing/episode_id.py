"""Which episode (an agent's session: one conversation's turns) a request belongs to.

Real clients already say it, each in its own way; the gateway reads what they send and asks for
nothing more:

- our header ``x-switchyard-episode`` (or an ``episode_id`` tag), for clients that set it;
- Claude Code: ``metadata.user_id`` carries the session. Versions 2.x send a JSON string
  ``{"device_id": ..., "account_uuid": ..., "session_id": ...}``; 1.x sent
  ``user_<hash>_account_<uuid>_session_<uuid>``. A ``user_id`` with no session in it names a
  person, not an episode, and is not used;
- Codex CLI (Responses API) and other OpenAI clients: ``prompt_cache_key``, which Codex sets to
  its conversation id. ``user`` and ``safety_identifier`` name people and are not used.

Each client-derived id is prefixed with where it came from (``claude-code:``, ``cache-key:``) so
two clients' ids cannot meet. Ids are bounded in length: the column is a key, not a blob.
"""

from __future__ import annotations

import re
from typing import Final

import orjson

MAX_EPISODE_ID: Final = 200
_SESSION_SUFFIX: Final = re.compile(r"_session_([0-9A-Za-z-]{1,100})$")


def claude_code_session(user_id: str | None) -> str | None:
    """The session id in Claude Code's ``metadata.user_id``; None when it carries none."""
    if not user_id:
        return None
    if user_id.startswith("{"):
        try:
            parsed = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            return None
        session = parsed.get("session_id") if isinstance(parsed, dict) else None
        return session if isinstance(session, str) and session else None
    match = _SESSION_SUFFIX.search(user_id)
    return match.group(1) if match else None


def episode_of(
    explicit: str | None,
    *,
    claude_user_id: str | None = None,
    prompt_cache_key: object = None,
) -> str | None:
    """The request's episode: the explicit one (header or tag) first, then what the client sent."""
    if explicit:
        return explicit[:MAX_EPISODE_ID]
    session = claude_code_session(claude_user_id)
    if session:
        return f"claude-code:{session}"[:MAX_EPISODE_ID]
    if isinstance(prompt_cache_key, str) and prompt_cache_key:
        return f"cache-key:{prompt_cache_key}"[:MAX_EPISODE_ID]
    return None
