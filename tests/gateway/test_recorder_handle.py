"""The recorder handle remembers the ids it was just handed (feedback finds a record still in the
writer) within a bound set by the writer's own queue; an id it forgot is found in the store."""

from __future__ import annotations

from pathlib import Path

from gateway.config import StoreSection
from gateway.recording.handle import RECENT_PER_QUEUED, open_recorder
from tests.gateway.recorder_helpers import stream_draft, until


async def test_recent_ids_are_bounded_by_the_writers_queue_and_the_rest_is_in_the_store(
    tmp_path: Path,
) -> None:
    config = StoreSection(
        url=f"sqlite:///{tmp_path / 't.db'}", spool_dir=tmp_path / "spool", queue_size=20
    )
    handle = await open_recorder(config)
    try:
        drafts = [stream_draft(f"answer {i}") for i in range(3 * RECENT_PER_QUEUED * 20)]
        for draft in drafts:
            handle.submit_draft(draft)
        assert len(handle._recent) == RECENT_PER_QUEUED * 20  # the oldest forgotten
        assert drafts[-1].id in handle._recent
        assert await handle.inference_owner(drafts[-1].id) is not None  # queued, or stored
        await until(lambda: handle.writer.stats().queue_depth == 0)
        assert drafts[0].id not in handle._recent
        assert await handle.inference_owner(drafts[0].id) is not None  # from the store
    finally:
        await handle.aclose()
