"""A request's episode comes from what real clients already send: Claude Code's session in
``metadata.user_id`` (both its formats), Codex's ``prompt_cache_key``, or our header."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson

from gateway.routing.episode_id import MAX_EPISODE_ID, claude_code_session, episode_of
from tests.gateway.conftest import store_gateway
from tests.gateway.test_recording import _read_all

_SESSION = "2f0c9b7e-3d1a-4c55-9a0e-6b1f8e2d7c44"


def test_claude_code_session_is_read_from_both_user_id_formats() -> None:
    v2 = orjson.dumps({"device_id": "d" * 64, "account_uuid": "", "session_id": _SESSION}).decode()
    assert claude_code_session(v2) == _SESSION
    assert claude_code_session(f"user_{'a' * 64}_account__session_{_SESSION}") == _SESSION
    for no_session in (None, "", "user-7", '{"device_id": "x"}', "{not json", '["a"]'):
        assert claude_code_session(no_session) is None


def test_explicit_episode_wins_and_people_are_not_episodes() -> None:
    assert episode_of("mine", claude_user_id=f"u_session_{_SESSION}") == "mine"
    assert episode_of(None, claude_user_id=f"u_session_{_SESSION}") == f"claude-code:{_SESSION}"
    assert episode_of(None, prompt_cache_key="conv-1") == "cache-key:conv-1"
    assert episode_of(None, claude_user_id="user-7") is None  # a person, not a session
    assert episode_of(None, prompt_cache_key=5) is None
    assert len(episode_of("x" * 10_000) or "") == MAX_EPISODE_ID


def test_each_door_records_the_episode_its_client_sent(frontier_sim: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    user_id = orjson.dumps({"device_id": "d", "account_uuid": "", "session_id": _SESSION})
    try:
        base = gw.base_url
        claude = httpx.post(
            base + "/v1/messages",
            json={
                "model": "auto",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": "hi"}],
                "metadata": {"user_id": user_id.decode()},
            },
        )
        codex = httpx.post(
            base + "/v1/responses",
            json={"model": "auto", "input": "hi", "prompt_cache_key": "0199a1b2-conv"},
        )
        chat = httpx.post(
            base + "/v1/chat/completions",
            json={"model": "auto", "messages": [{"role": "user", "content": "hi"}], "user": "u1"},
        )
        for r in (claude, codex, chat):
            assert r.status_code == 200, r.text
    finally:
        gw.stop()
    episodes = {row.inference.id: row.inference.episode_id for row in _read_all(url)}
    assert episodes[claude.headers["x-request-id"]] == f"claude-code:{_SESSION}"
    assert episodes[codex.headers["x-request-id"]] == "cache-key:0199a1b2-conv"
    assert episodes[chat.headers["x-request-id"]] is None  # `user` names a person
