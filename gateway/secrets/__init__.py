"""Secrets on the request path: where a request's and an answer's texts are in each wire format
(:mod:`.texts`), the request scanned and redacted with :mod:`traffic.scrub` (:mod:`.scanner`),
and a streamed answer's placeholders put back as its events pass (:mod:`.stream`). Which target
gets what (``secrets: allow | redact | block``) is the doors' (gateway.doors.secret_guard);
docs/secrets.md, "The request path". Nothing here imports the scrubber (and detect-secrets) at
import time: it loads on a worker thread, only when a target needs it."""
