"""The gateway's handle on the traffic store: open the backend, run the async writer."""

from __future__ import annotations

from gateway.config import StoreSection
from gateway.store.records import InferenceRecord


class RecorderHandle:
    """Placeholder until the writer lands."""

    def submit(self, record: InferenceRecord) -> None:
        return None

    def stats(self) -> dict[str, float]:
        return {}

    async def aclose(self) -> None:
        return None


async def open_recorder(config: StoreSection) -> RecorderHandle:
    return RecorderHandle()
