"""``POST /v1/feedback``: a user's reaction to an answer, tied to the inference by its id.

Body: ``{"inference_id": "<x-request-id of the answer>", "kind": "accepted" | "rejected" |
"edited" | "score" | "comment" | "demonstration", "value": number?, "payload": object?}``
(e.g. ``payload.text`` holds the edited answer or the demonstration). Many per inference.
Written through the same async writer as the traffic record.

Feedback is training signal, so who may give it is checked like a request: the caller's API key
(401/403 as on the inference doors), and feedback is taken only on an inference made with that
same key, or from the admin credential on any inference. An unknown id and an inference of
another key get the same 404, so the answer never tells whether an id exists. Where auth is not
required, a caller without a key may give feedback on inferences made without a key.
Bad kind or field -> 400; a payload is bounded like a request body (depth, string size).
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.access import is_admin
from gateway.doors.skeleton import parse_json_object, read_body
from gateway.errors import (
    MAPPED_ERRORS,
    InvalidRequestError,
    NotFoundError,
    json_error_response,
)
from gateway.recording.handle import RecorderHandle
from gateway.state import GatewayState
from gateway.wire.bounds import check_depth
from traffic.store import FeedbackKind, FeedbackRecord

FEEDBACK_BODY_LIMIT = 1024 * 1024


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inference_id: str = Field(min_length=1)
    kind: FeedbackKind
    value: float | None = None
    payload: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _kind_needs(self) -> FeedbackIn:
        if self.kind == "score" and self.value is None:
            raise ValueError("kind `score` needs a numeric `value`")
        if self.kind in ("edited", "demonstration") and not (self.payload or {}).get("text"):
            raise ValueError(f"kind `{self.kind}` needs `payload.text`")
        return self


async def post_feedback(request: Request) -> Response:
    recorder: RecorderHandle | None = request.app.state.recorder
    state: GatewayState = request.app.state.switchyard
    try:
        admin = is_admin(request)
        caller = (
            None if admin else (await state.admission.admit(request.headers, limit=False)).key_id
        )
        if recorder is None:
            raise NotFoundError("feedback needs the traffic store (store.enabled: true)")
        body = parse_json_object(await read_body(request, FEEDBACK_BODY_LIMIT))
        check_depth(body, state.config.gateway.limits)
        try:
            fb = FeedbackIn.model_validate(body)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ())) or None
            raise InvalidRequestError(
                f"Invalid feedback: {err.get('msg')}", param=loc, code="invalid_value"
            ) from exc
        owner = await recorder.inference_owner(fb.inference_id)
        if owner is None or not (admin or owner.api_key_id == caller):
            raise NotFoundError(  # the same answer for "unknown" and "not yours"
                f"no inference with id {fb.inference_id[:64]}",
                param="inference_id",
                code="inference_not_found",
            )
    except MAPPED_ERRORS as exc:
        return json_error_response(exc)
    record = FeedbackRecord(
        inference_id=fb.inference_id, kind=fb.kind, value=fb.value, payload=fb.payload
    )
    recorder.submit_feedback(record)
    monitor = state.release_monitor
    if monitor is not None and fb.kind in ("accepted", "rejected"):
        monitor.verdict(fb.inference_id, fb.kind == "accepted")  # a running release's test
    out = {"id": record.id, "object": "feedback", "inference_id": fb.inference_id, "kind": fb.kind}
    return Response(orjson.dumps(out), 200, media_type="application/json")


def routes() -> list[BaseRoute]:
    return [Route("/v1/feedback", post_feedback, methods=["POST"])]
