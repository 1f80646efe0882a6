"""Where an exchange's record goes: the interface the request path writes through.

Production's sink is :class:`~gateway.recording.handle.RecorderHandle` (the writer process, or
the in-process writer); tests pass one that keeps records in memory. Both build the record with
the one builder, :func:`gateway.recording.draft.build_record`.
"""

from __future__ import annotations

from typing import Protocol

from gateway.recording.draft import InferenceDraft
from traffic.store import ShadowRecord


class RecordSink(Protocol):
    """Every method the request path calls on its sink."""

    def submit_draft(self, draft: InferenceDraft) -> None:
        """An exchange's record, as its draft (built where it is written)."""

    def submit_shadow(self, record: ShadowRecord) -> None:
        """A shadow call's answer, beside the inference it shadows."""
