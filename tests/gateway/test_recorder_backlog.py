"""A writer process that falls behind (the gateway's processes take the CPU first): the gateway
keeps at most ``store.queue_size`` records (and ``store.queue_bytes`` of them) in flight, spools
the rest itself, and the child replays them once it runs again; nothing is lost, nothing is
stored twice."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Final

import pytest

from gateway.recording.draft import OUT_OF_BAND_BYTES, Deferred, InferenceDraft, build_record
from gateway.recording.process import decode_batch, encode_batch
from tests.gateway.recorder_helpers import (
    child_pid,
    running_writer,
    stream_draft,
    until,
    until_stored,
)
from traffic.store import FeedbackRecord, JsonText


async def test_a_writer_process_far_behind_spools_the_rest_and_replays_it_losing_nothing(
    tmp_path: Path,
) -> None:
    async with running_writer(
        tmp_path, queue_size=20, batch_size=10, flush_interval_s=0.01
    ) as writer:
        pid = child_pid(writer)
        os.kill(pid, signal.SIGSTOP)  # as starved as a process gets
        drafts = [stream_draft(f"answer {i}") for i in range(100)]
        for d in drafts:
            writer.submit(d)
        await until(lambda: writer.stats().spooled_total == 80)
        assert writer.stats().queue_depth == 20  # in flight: the bound, never more
        assert list((tmp_path / "spool").glob("segment-*"))
        os.kill(pid, signal.SIGCONT)
        # Caught up before any close: the child was told to replay what the gateway spooled.
        await until_stored(tmp_path, {d.id: f"answer {i}" for i, d in enumerate(drafts)})
        await until(lambda: writer.stats().queue_depth == 0)
        assert child_pid(writer) == pid and not writer.in_process
        assert not list((tmp_path / "spool").glob("segment-*"))  # replayed, then deleted


async def test_long_answers_in_flight_are_bounded_by_bytes_not_only_by_count(
    tmp_path: Path,
) -> None:
    """A record count does not bound memory when answers are long: past ``store.queue_bytes``
    of frames in flight the gateway spools the rest, and the child replays it; nothing lost."""
    async with running_writer(
        tmp_path, queue_size=10_000, queue_bytes=64 * 1024, batch_size=5, flush_interval_s=0.01
    ) as writer:
        pid = child_pid(writer)
        os.kill(pid, signal.SIGSTOP)
        long_text = "x" * 8_000  # a long answer: ~8 KB a record
        drafts = [stream_draft(f"{i} {long_text}") for i in range(60)]
        for d in drafts:
            writer.submit(d)
        await until(lambda: writer.stats().spooled_total > 0)
        await until(lambda: writer.stats().spooled_total + writer.stats().queue_depth == 60)
        in_flight = writer.stats().queue_depth
        assert 0 < in_flight < 60 and in_flight * 8_000 <= 64 * 1024 + 5 * 9_000
        os.kill(pid, signal.SIGCONT)
        await until_stored(tmp_path, {d.id: f"{i} {long_text}" for i, d in enumerate(drafts)})


SCHED_IDLE: Final = 5  # the policy field of /proc/<pid>/task/<tid>/stat (sched.h)


def _thread_policies(pid: int) -> dict[int, int]:
    """Each thread's scheduling policy (field 41 of its stat, counted after the name)."""
    policies = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        policies[int(tid)] = int(stat.rsplit(")", 1)[1].split()[38])
    return policies


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
async def test_every_thread_of_the_writer_process_yields_the_cpu_to_serving(
    tmp_path: Path,
) -> None:
    """Its SQLite thread too, started before the process lowered itself, and threads started
    after (a batch written first, so the store's threads exist)."""
    async with running_writer(tmp_path, flush_interval_s=0.01) as writer:
        draft = stream_draft("hello")
        writer.submit(draft)
        await until_stored(tmp_path, {draft.id: "hello"})
        policies = _thread_policies(child_pid(writer))
        assert len(policies) >= 2  # the loop and the store's thread
        assert set(policies.values()) == {SCHED_IDLE}
        assert os.sched_getscheduler(0) != os.SCHED_IDLE  # the gateway serves as it did


def test_a_long_streams_bytes_and_a_large_body_travel_beside_the_pickle() -> None:
    body = b'{"model":"m","messages":[{"role":"user","content":"' + b"x" * 50_000 + b'"}]}'
    draft = stream_draft("y" * OUT_OF_BAND_BYTES)._replace(request_json=body)
    raw = draft.answers.args[1]
    batch = encode_batch(3, [draft])
    assert len(batch.pickled) < 2_000  # neither the body nor the stream's bytes copied into it
    assert {id(b) for b in batch.buffers} == {id(raw[0]), id(body)}  # the very bytes, no copies
    assert batch.size == sum(len(p) for p in batch.parts())
    seq, [item] = decode_batch(batch.payload())
    assert seq == 3 and isinstance(item, InferenceDraft)
    assert item.request == JsonText(body) and type(item.request.data) is bytes
    assert item.answers.args[1] == raw and type(item.answers.args[1][0]) is bytes
    assert build_record(item).response == build_record(draft).response


def test_a_short_streams_bytes_and_a_small_body_go_in_the_pickle() -> None:
    draft = stream_draft("hello")._replace(request_json=b'{"model":"m"}')
    batch = encode_batch(4, [draft])
    assert batch.buffers == ()
    _, [item] = decode_batch(batch.payload())
    assert isinstance(item, InferenceDraft) and item.request == JsonText(b'{"model":"m"}')
    assert build_record(item).response == build_record(draft).response


def test_drafts_and_records_cross_the_pipe_unchanged() -> None:
    draft = stream_draft("hello")
    feedback = FeedbackRecord(inference_id=draft.id, kind="accepted")
    seq, items = decode_batch(encode_batch(7, [draft, feedback]).payload())
    assert seq == 7 and items == [draft, feedback]
    assert isinstance(items[0], InferenceDraft) and isinstance(items[0].answers, Deferred)
    assert build_record(items[0]) == build_record(draft)
