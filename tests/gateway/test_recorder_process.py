"""The record writer in its own process: records arrive assembled, feedback finds ids just
submitted, a writer process killed under load loses no record, and a gateway where no process
can start records from its own process."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import sqlite3
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.doors.anthropic.answer import completion_of_message
from gateway.doors.anthropic.stream import assemble_message
from gateway.recording import process as recorder_process
from gateway.recording.draft import (
    Deferred,
    InferenceDraft,
    build_record,
    from_native_stream,
)
from gateway.recording.process import WriterProcess
from tests.fixtures.gateway_fixture import GatewayThread
from tests.gateway.conftest import store_gateway
from tests.gateway.recorder_helpers import (
    child_pid,
    read_stored,
    running_writer,
    stream_draft,
    until,
)
from traffic.store import InferenceFilter, InferenceRow, StoreConfig, open_store

CHAT = {"model": "auto", "messages": [{"role": "user", "content": "record me"}]}
MESSAGES = {
    "model": "claude-haiku-4-5",
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "record me too"}],
}


def _read_all(url: str) -> dict[str, InferenceRow]:
    async def read() -> list[InferenceRow]:
        backend = open_store(StoreConfig(url=url))
        await backend.connect()
        try:
            return [row async for row in backend.iter_inferences(InferenceFilter())]
        finally:
            await backend.close()

    return {r.inference.id: r for r in asyncio.run(read())}


def _writer(gw: GatewayThread) -> WriterProcess:
    writer = gw.app.state.recorder.writer
    assert isinstance(writer, WriterProcess)
    return writer


def test_the_writer_process_stores_assembled_answers_and_feedback_finds_them(
    frontier_sim: Any, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    try:
        writer = _writer(gw)
        assert not writer.in_process and child_pid(writer) != os.getpid()
        base = gw.base_url
        unary = httpx.post(base + "/v1/chat/completions", json=CHAT, timeout=30)
        streamed = httpx.post(
            base + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30
        )
        native = httpx.post(base + "/v1/messages", json={**MESSAGES, "stream": True}, timeout=30)
        assert native.status_code == 200, native.text
        rid = streamed.headers["x-request-id"]
        # Submitted a moment ago, maybe not stored yet: feedback still finds it.
        fb = httpx.post(base + "/v1/feedback", json={"inference_id": rid, "kind": "accepted"})
        assert fb.status_code == 200
    finally:
        gw.stop()  # the child drains before the gateway is down
    rows = _read_all(url)
    ids = [r.headers["x-request-id"] for r in (unary, streamed, native)]
    assert set(ids) <= set(rows)
    s = rows[rid]
    assert s.inference.stream and s.inference.response is not None
    assert s.inference.response["choices"][0]["message"]["content"].startswith("Simulated")
    assert [f.kind for f in s.feedback] == ["accepted"]
    m = rows[native.headers["x-request-id"]].inference
    assert m.response is not None and m.response["type"] == "message"
    assert m.canonical_response is not None and m.canonical_response["object"] == "chat.completion"


def test_the_writer_process_stores_the_clients_body_as_it_came(
    frontier_sim: Any, tmp_path: Path
) -> None:
    """The request goes to the writer process as the bytes the client sent (not pickled as an
    object) and is stored as they are; the record reads back as the parsed body. The Messages
    door's canonical request (its chat translation) is stored as orjson encoded it."""
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    db = tmp_path / "traffic.db"
    chat = (
        b'{ "model" : "auto",\n  "messages": [{"role": "user", '
        b'"content": "caf\\u00e9 \xe2\x9c\x93"}],\n  "x_unknown_field": {"kept": [1, 2.5, null]} }'
    )
    messages = json.dumps({**MESSAGES, "metadata": {"user_id": "u1"}}, indent=2).encode()
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    try:
        assert not _writer(gw).in_process
        headers = {"content-type": "application/json"}
        one = httpx.post(gw.base_url + "/v1/chat/completions", content=chat, headers=headers)
        two = httpx.post(gw.base_url + "/v1/messages", content=messages, headers=headers)
        assert one.status_code == 200 and two.status_code == 200, (one.text, two.text)
    finally:
        gw.stop()
    ids = [one.headers["x-request-id"], two.headers["x-request-id"]]
    with sqlite3.connect(db) as conn:
        stored = dict(conn.execute("SELECT id, request FROM inference").fetchall())
    assert stored[ids[0]] == chat.decode()  # byte for byte: spaces, escapes, unknown fields
    assert stored[ids[1]] == messages.decode()
    rows = _read_all(url)
    request = rows[ids[0]].inference.request
    assert isinstance(request, dict) and request == json.loads(chat)
    assert request["messages"][0]["content"] == "café ✓"
    message = rows[ids[1]].inference
    assert message.request == json.loads(messages)
    assert isinstance(message.canonical_request, dict)
    assert message.canonical_request["messages"][-1]["content"] == "record me too"


def test_a_killed_writer_process_loses_no_record(frontier_sim: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    got: list[str] = []

    def client(n: int) -> None:
        with httpx.Client(timeout=30) as c:
            for i in range(n):
                body = {**CHAT, "stream": i % 2 == 0}
                got.append(
                    c.post(gw.base_url + "/v1/chat/completions", json=body).headers["x-request-id"]
                )

    try:
        writer = _writer(gw)
        deadline = time.monotonic() + 30
        while writer.stats().tasks_alive < 3:  # the child runs (one dead before is "cannot start")
            assert time.monotonic() < deadline, "the writer process never reported"
            time.sleep(0.05)
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(client, 60) for _ in range(4)]
            while len(got) < 40 and time.monotonic() < deadline:
                time.sleep(0.01)
            first = child_pid(writer)
            os.kill(first, signal.SIGKILL)  # records in its memory and in the pipe are gone
            for fut in futures:
                fut.result()
        deadline = time.monotonic() + 20
        while writer._proc is None or writer._proc.pid == first:
            assert time.monotonic() < deadline, "no new writer process"
            time.sleep(0.05)
        assert not writer.in_process
    finally:
        gw.stop()
    rows = _read_all(url)
    assert len(got) == 240 and set(got) <= set(rows)


def test_where_no_process_can_start_the_gateway_records_itself(
    frontier_sim: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))
    url = f"sqlite:///{tmp_path / 'traffic.db'}"
    gw = store_gateway(frontier_sim.base_url, url, tmp_path / "spool").start()
    try:
        assert _writer(gw).in_process
        assert httpx.get(gw.base_url + "/ready").status_code == 200
        r = httpx.post(gw.base_url + "/v1/chat/completions", json={**CHAT, "stream": True})
    finally:
        gw.stop()
    assert r.headers["x-request-id"] in _read_all(url)


def test_a_draft_pickles_and_builds_the_record_it_stands_for() -> None:
    events = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude",
                    "content": [],
                    "stop_reason": None,
                    "usage": {"input_tokens": 3, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "hello"},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 1},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    import orjson

    raw = [b"".join(b"event: %s\ndata: %s\n\n" % (n.encode(), orjson.dumps(d)) for n, d in events)]
    draft = InferenceDraft(
        "0190a000-0000-7000-8000-000000000001", time.time(), None, None, "messages",
        "anthropic.messages", {"model": "claude"}, None,
        Deferred(from_native_stream, (assemble_message, completion_of_message, raw)),
        "frontier-anthropic", "claude", None, None, None, None, 200, None, True, 1.0, 0.5,
        3, 1, None, None, None, {}, [],
    )  # fmt: skip
    again = pickle.loads(pickle.dumps(draft, protocol=5))
    record = build_record(again)
    assert record == build_record(draft)
    assert record.response is not None and record.response["content"][0]["text"] == "hello"
    assert record.canonical_response is not None
    assert record.canonical_response["choices"][0]["message"]["content"] == "hello"


async def test_a_silent_writer_process_is_unhealthy_and_close_drains_what_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recorder_process, "STALE_STATS_S", 1.0)
    async with running_writer(tmp_path) as writer:
        assert writer.healthy
        pid = child_pid(writer)
        os.kill(pid, signal.SIGSTOP)  # alive, but it no longer reports
        await until(lambda: not writer.healthy)
        os.kill(pid, signal.SIGCONT)
        await until(lambda: writer.healthy)
        drafts = [stream_draft(f"answer {i}") for i in range(50)]
        for d in drafts:
            writer.submit(d)
        await writer.close()
        writer.submit(stream_draft("after close"))  # spooled, never dropped
    rows = await read_stored(tmp_path)
    assert {d.id for d in drafts} <= set(rows)
    assert rows[drafts[7].id] == "answer 7"
    assert list((tmp_path / "spool").glob("segment-*"))


async def test_the_writer_process_gathers_frames_into_its_own_batches(tmp_path: Path) -> None:
    """Frames leave the gateway every flush_interval_s; the process writes them to the database
    once per process_flush_interval_s (fewer, larger transactions), and close() writes what it
    holds at once."""
    async with running_writer(
        tmp_path, flush_interval_s=0.01, process_flush_interval_s=60.0
    ) as writer:
        drafts = [stream_draft(f"answer {i}") for i in range(30)]
        for i, d in enumerate(drafts):
            writer.submit(d)
            if i % 10 == 9:
                await asyncio.sleep(0.05)  # a frame of 10
        await until(lambda: writer.stats().queued_total == len(drafts))  # all in the process
        assert await read_stored(tmp_path) == {}  # held for its window, not one transaction each
        await writer.close()
    rows = await read_stored(tmp_path)
    assert rows == {d.id: f"answer {i}" for i, d in enumerate(drafts)}


async def test_the_writer_process_writes_early_when_what_it_holds_grows_large(
    tmp_path: Path,
) -> None:
    """The gateway keeps each frame until it is acknowledged, within store.queue_bytes: the
    process's window ends early once the frames it read reach a quarter of that."""
    async with running_writer(
        tmp_path, flush_interval_s=0.01, process_flush_interval_s=60.0, queue_bytes=40_000
    ) as writer:
        drafts = [stream_draft(f"answer {i}") for i in range(100)]
        for i, d in enumerate(drafts):
            writer.submit(d)
            if i % 10 == 9:
                await asyncio.sleep(0.05)  # a frame of 10 (~4 KB)
        await until(lambda: writer.stats().written_total >= 10)  # within the 60 s window
        assert writer.stats().spooled_total == 0
    rows = await read_stored(tmp_path)
    assert rows == {d.id: f"answer {i}" for i, d in enumerate(drafts)}
