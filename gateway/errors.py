"""The gateway's one error hierarchy and its one mapping to HTTP.

GatewayError                      status  OpenAI type
 +-- InvalidRequestError           400    invalid_request_error   (malformed JSON, bad field)
 |    +-- ContextWindowExceededError 400   invalid_request_error   (prompt over a target's window)
 |    +-- SecretsInRequestError    400    invalid_request_error   (secrets for a `block` target)
 +-- AuthenticationError           401    authentication_error
 +-- PermissionDeniedError         403    permission_error        (revoked key, budget spent)
 +-- NotFoundError                 404    not_found_error         (unknown model, unknown id)
 +-- PayloadTooLargeError          413    invalid_request_error
 +-- RateLimitedError              429    rate_limit_error        (+ Retry-After)
 +-- ClientDisconnectedError       499    client_disconnected     (gone mid-body; nginx's code)
 +-- ShuttingDownError             503    service_unavailable     (past the drain deadline)
 +-- ServiceUnavailableError       503    service_unavailable     (e.g. the key store is down)
 +-- UpstreamError                 502    upstream_error          (a back-end answered badly)
 |    +-- UpstreamRateLimitedError 429    rate_limit_error        (+ Retry-After, passed on)
 |    +-- UpstreamClientError      4xx    invalid_request_error   (the back-end refused the input)
 |    +-- UpstreamTimeoutError     504    timeout_error
 |    +-- UpstreamUnavailableError 503    service_unavailable     (refused connection, breaker open)
 +-- AllBackendsFailedError        last failure's status; collects every attempt's error

Router errors (``router.errors``) and the traffic store's (``traffic.store.errors``: unreachable
503 ``store_unavailable``, anything else it refuses 500 ``store_error``) are mapped here too, and
so are validation failures (:func:`invalid_request`: a 400 naming the field).
:func:`error_response_parts` is the only place that turns an exception into a status, headers and
body.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import orjson
from starlette.responses import Response

from router.errors import PolicyConfigError, RoutingError, UnknownModelError
from router.replicas import NoHealthyReplicaError
from traffic.store.errors import StoreError, StoreUnavailable


class GatewayError(Exception):
    status = 500
    error_type = "internal_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequestError(GatewayError):
    status = 400
    error_type = "invalid_request_error"


class ContextWindowExceededError(InvalidRequestError):
    """The prompt is longer than the context window of the target it names (or of every target
    that could serve it), as counted before any upstream call."""

    code = "context_length_exceeded"  # OpenAI's code for the same refusal


class SecretsInRequestError(InvalidRequestError):
    """The request holds secrets and its target refuses them (``secrets: block``), before any
    upstream call. The message names the kinds found, never a value."""

    code = "secrets_in_request"

    def __init__(self, kinds: Sequence[str], target: str):
        super().__init__(
            f"The request holds secrets ({', '.join(kinds)}); target `{target}` is not sent "
            "secrets. Remove them from the conversation and retry."
        )
        self.kinds = tuple(kinds)


class AuthenticationError(GatewayError):
    status = 401
    error_type = "authentication_error"
    code = "invalid_api_key"


class PermissionDeniedError(GatewayError):
    status = 403
    error_type = "permission_error"


class NotFoundError(GatewayError):
    status = 404
    error_type = "not_found_error"


class PayloadTooLargeError(GatewayError):
    status = 413
    error_type = "invalid_request_error"
    code = "request_too_large"


class RateLimitedError(GatewayError):
    status = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"

    def __init__(self, message: str, *, retry_after_s: float, code: str | None = None):
        super().__init__(message, code=code)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class ClientDisconnectedError(GatewayError):
    """The client went away before its request was read whole; recorded as 499, nobody reads
    the answer."""

    status = 499
    error_type = "client_disconnected"
    code = "client_disconnected"


class ServiceUnavailableError(GatewayError):
    status = 503
    error_type = "service_unavailable"


class ShuttingDownError(ServiceUnavailableError):
    """The gateway stopped past its drain deadline while this request was still being served."""

    code = "server_shutting_down"


class UpstreamError(GatewayError):
    """A back-end failed. ``retriable`` says whether another back-end may be tried."""

    status = 502
    error_type = "upstream_error"
    retriable = True

    def __init__(self, message: str, *, backend: str, code: str | None = None):
        super().__init__(message, code=code)
        self.backend = backend


class UpstreamRateLimitedError(UpstreamError):
    status = 429
    error_type = "rate_limit_error"
    code = "upstream_rate_limited"

    def __init__(self, message: str, *, backend: str, retry_after_s: float = 1.0):
        super().__init__(message, backend=backend)
        self.retry_after_s = retry_after_s

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(max(1, round(self.retry_after_s)))}


class UpstreamClientError(UpstreamError):
    """The back-end refused the request itself (4xx); trying elsewhere would not help."""

    error_type = "invalid_request_error"
    retriable = False

    def __init__(self, message: str, *, backend: str, status: int, param: str | None = None):
        super().__init__(message, backend=backend)
        self.status = status if 400 <= status < 500 else 400
        self.param = param


class UpstreamTimeoutError(UpstreamError):
    status = 504
    error_type = "timeout_error"
    code = "upstream_timeout"


class UpstreamUnavailableError(UpstreamError):
    status = 503
    error_type = "service_unavailable"
    code = "upstream_unavailable"


class AllBackendsFailedError(GatewayError):
    """Every target of the chain failed; carries each attempt's error, answers with the last."""

    def __init__(self, errors: Sequence[UpstreamError]):
        self.errors = list(errors)
        last = self.errors[-1]
        summary = "; ".join(f"{e.backend}: {e.message}" for e in self.errors)
        super().__init__(f"all back-ends failed ({summary})", code=last.code)
        self.status = last.status
        self.error_type = last.error_type

    def headers(self) -> dict[str, str]:
        return self.errors[-1].headers()


def upstream_error_for_status(
    backend: str, status: int, message: str, retry_after: str | None = None
) -> UpstreamError:
    """The error for a back-end's non-2xx answer: the one mapping of upstream statuses.

    - 429: rate limited (``Retry-After`` passed on); another back-end may be tried;
    - 408, 504: timeout; 503: unavailable; other 5xx: 502. All upstream faults: the breaker
      counts them and the next target is tried;
    - 401, 403, 404: the back-end refused *our* credentials or model name, a configuration
      fault of that back-end, not the client's: 502, counted, next target tried;
    - any other 4xx (400, 409, 413, 415, 422, ...): the back-end refused the client's input;
      passed on with its status, not retried, never counted against the breaker.
    """
    if status == 429:
        try:
            wait = float(retry_after) if retry_after else 1.0
        except ValueError:
            wait = 1.0
        return UpstreamRateLimitedError(message, backend=backend, retry_after_s=wait)
    if status in (408, 504):
        return UpstreamTimeoutError(message, backend=backend)
    if status == 503:
        return UpstreamUnavailableError(message, backend=backend)
    if 400 <= status < 500 and status not in (401, 403, 404):
        return UpstreamClientError(message, backend=backend, status=status)
    return UpstreamError(message, backend=backend)


# What a handler turns into its error answer (error_response_parts maps each by name): the
# gateway's own errors, the router's, and the traffic store's (handlers that read or write it).
MAPPED_ERRORS: Final = (GatewayError, RoutingError, StoreError)


# The parts of a request a validation error's location starts with (FastAPI's ``loc``).
_REQUEST_PARTS: Final = ("body", "query", "path", "header", "cookie")


def invalid_request(errors: Sequence[Mapping[str, Any]]) -> InvalidRequestError:
    """A request that failed validation, as a 400: ``errors`` as pydantic and FastAPI list them
    (``loc``, ``msg``, ``type``). The message names each failure where it is (at most five);
    ``param`` is the first one's field, dotted, without the part of the request it is in
    (``body``, ``query``); ``code`` is ``invalid_json`` for a body that is not JSON."""
    shown = [_located(e) for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    first: Mapping[str, Any] = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
        reason = (first.get("ctx") or {}).get("error") or first.get("msg")
        return InvalidRequestError(f"the body is not JSON: {reason}", code="invalid_json")
    loc = [str(p) for p in first.get("loc", ())]
    field = loc[1:] if loc and loc[0] in _REQUEST_PARTS else loc
    message = "invalid request: " + "; ".join(shown) + more
    return InvalidRequestError(message, param=".".join(field) or None)


def _located(error: Mapping[str, Any]) -> str:
    where = ".".join(str(p) for p in error.get("loc", ()))
    return f"{where}: {error.get('msg')}" if where else str(error.get("msg"))


def error_body(
    message: str, error_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def error_response_parts(exc: Exception) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Map any exception to (status, headers, OpenAI-shaped body). The single mapping."""
    if isinstance(exc, GatewayError):
        return (
            exc.status,
            exc.headers(),
            error_body(exc.message, exc.error_type, exc.param, exc.code),
        )
    if isinstance(exc, UnknownModelError):
        return 404, {}, error_body(str(exc), "invalid_request_error", "model", "model_not_found")
    if isinstance(exc, NoHealthyReplicaError):
        return 503, {}, error_body(str(exc), "service_unavailable", None, "no_healthy_replica")
    if isinstance(exc, PolicyConfigError):
        return 500, {}, error_body(str(exc), "internal_error", None, "policy_config")
    if isinstance(exc, RoutingError):
        return 500, {}, error_body(str(exc), "internal_error", None, None)
    if isinstance(exc, StoreUnavailable):
        msg = f"the traffic store is unavailable: {exc}"
        return 503, {}, error_body(msg, "service_unavailable", None, "store_unavailable")
    if isinstance(exc, StoreError):
        msg = f"the traffic store refused the request: {exc}"
        return 500, {}, error_body(msg, "internal_error", None, "store_error")
    return 500, {}, error_body("internal error", "internal_error", None, None)


def json_error_response(exc: Exception) -> Response:
    """:func:`error_response_parts` as a JSON response (OpenAI's error shape): what the admin,
    feedback, episode and model-list handlers answer an error with."""
    status, headers, body = error_response_parts(exc)
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def _upstream_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:300].decode(errors="replace")
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message", err))
        return str(err)
    return str(data)


def upstream_status_error(
    name: str, status: int, body: bytes, retry_after: str | None
) -> UpstreamError:
    """The gateway error for a non-2xx answer from an OpenAI-compatible back-end."""
    msg = f"{name} answered {status}: {_upstream_message(body)}"
    return upstream_error_for_status(name, status, msg, retry_after)
