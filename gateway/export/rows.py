"""The row shape the exporters consume: one recorded inference with its feedback.

This mirrors what the traffic store's read API yields (``inference`` joined with its
``feedback`` rows). The exporters never touch the database; anything that yields these dicts can
feed them, which is also how the tests build synthetic traffic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, NotRequired, TypedDict

Endpoint = Literal["chat.completions", "completions", "responses", "messages"]
WireFormat = Literal["openai.chat", "openai.completions", "openai.responses", "anthropic.messages"]
FeedbackKind = Literal["accepted", "rejected", "edited", "score", "comment", "demonstration"]


class FeedbackItem(TypedDict):
    """One feedback row. ``edited`` and ``demonstration`` carry their text in ``payload["text"]``;
    ``score`` carries its number in ``value``."""

    kind: FeedbackKind
    value: float | None
    payload: dict[str, Any] | None
    ts: datetime


class ExportRow(TypedDict):
    """One recorded inference. ``id`` is a UUIDv7 string, so sorting ids sorts by time.

    ``request`` and ``response`` are the bodies in their own wire format (``response`` is the
    final assembled answer, ``None`` when the call failed). ``canonical_request`` and
    ``canonical_response`` are the exchange in the internal format where the door translated it
    (see ``gateway.store.InferenceRecord``); absent or ``None`` elsewhere and in older rows.
    ``episode_id`` groups the turns of one session; ``None`` means the row is an episode of its
    own.
    """

    id: str
    ts: datetime
    api_key_id: str | None
    episode_id: str | None
    endpoint: Endpoint
    wire_format: WireFormat
    request: dict[str, Any]
    response: dict[str, Any] | None
    canonical_request: NotRequired[dict[str, Any] | None]
    canonical_response: NotRequired[dict[str, Any] | None]
    route_target: str | None
    served_model: str | None
    weights_version: str | None
    status: int
    tags: dict[str, str]
    cost_usd: float | None
    feedback: list[FeedbackItem]
