"""``POST /v1/feedback``: a user's reaction to an answer, tied to the inference by its id.

Body: ``{"inference_id": "<x-request-id of the answer>", "kind": "accepted" | "rejected" |
"edited" | "score" | "comment" | "demonstration", "value": number?, "payload": object?}``
(e.g. ``payload.text`` holds the edited answer or the demonstration). Many per inference.
Unknown inference id -> 404; bad kind or field -> 400. Written through the same async writer as
the traffic record.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from gateway.api_openai import parse_json_object, read_body
from gateway.errors import GatewayError, InvalidRequestError, NotFoundError, error_response_parts
from gateway.recording import RecorderHandle
from gateway.store import FeedbackRecord

FEEDBACK_BODY_LIMIT = 1024 * 1024


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    inference_id: str = Field(min_length=1)
    kind: Literal["accepted", "rejected", "edited", "score", "comment", "demonstration"]
    value: float | None = None
    payload: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _kind_needs(self) -> FeedbackIn:
        if self.kind == "score" and self.value is None:
            raise ValueError("kind `score` needs a numeric `value`")
        if self.kind in ("edited", "demonstration") and not (self.payload or {}).get("text"):
            raise ValueError(f"kind `{self.kind}` needs `payload.text`")
        return self


def _error(exc: GatewayError) -> Response:
    status, headers, body = error_response_parts(exc)
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


async def post_feedback(request: Request) -> Response:
    recorder: RecorderHandle | None = request.app.state.recorder
    try:
        if recorder is None:
            raise NotFoundError("feedback needs the traffic store (store.enabled: true)")
        body = parse_json_object(await read_body(request, FEEDBACK_BODY_LIMIT))
        try:
            fb = FeedbackIn.model_validate(body)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ())) or None
            raise InvalidRequestError(
                f"Invalid feedback: {err.get('msg')}", param=loc, code="invalid_value"
            ) from exc
        if not await recorder.inference_exists(fb.inference_id):
            raise NotFoundError(
                f"no inference with id {fb.inference_id}",
                param="inference_id",
                code="inference_not_found",
            )
    except GatewayError as exc:
        return _error(exc)
    record = FeedbackRecord(
        inference_id=fb.inference_id, kind=fb.kind, value=fb.value, payload=fb.payload
    )
    recorder.submit_feedback(record)
    out = {"id": record.id, "object": "feedback", "inference_id": fb.inference_id, "kind": fb.kind}
    return Response(orjson.dumps(out), 200, media_type="application/json")


def routes() -> list[BaseRoute]:
    return [Route("/v1/feedback", post_feedback, methods=["POST"])]
