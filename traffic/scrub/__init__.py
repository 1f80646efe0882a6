"""Secrets and PII out of text: one scrubber for every training-data path and the gateway.

:func:`scrub` finds secrets (vendor API keys and tokens, private keys, JWTs, passwords in URLs,
on command lines and assigned to secret-like names) and PII (emails, card numbers, IP
addresses, phone numbers), replaces each with a stable placeholder (``<SECRET_GITHUB_TOKEN_1>``,
``<EMAIL_2>``: the same value, the same placeholder within a text) and returns the findings,
so that an answer to a scrubbed request can have the originals put back (:func:`restore`).
:class:`Placeholders` numbers the placeholders of several texts as one (a request's messages:
the gateway's request path, docs/secrets.md).

Modules: ``rules`` (the hand-written detectors), ``plugins`` (detect-secrets' maintained
plugins as span detectors), ``scrubber`` (merging their spans, the placeholders). Which
detector covers which kind, and the measurements behind the choice: docs/secrets.md.

Importing this package costs nothing: its names load on first use (PEP 562), with
detect-secrets behind them (~0.15 s: it imports ``requests``), so that a module that may scrub
(the dataset exporters, the gateway) does not pay for it until it does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traffic.scrub.rules import PII_KINDS
    from traffic.scrub.scrubber import (
        PLACEHOLDER,
        Finding,
        Placeholders,
        Scrubbed,
        category,
        detect,
        restore,
        scrub,
    )

__all__ = [
    "PII_KINDS",
    "PLACEHOLDER",
    "Finding",
    "Placeholders",
    "Scrubbed",
    "category",
    "detect",
    "restore",
    "scrub",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'traffic.scrub' has no attribute {name!r}")
    value = getattr(importlib.import_module("traffic.scrub.scrubber"), name)
    globals()[name] = value  # found directly from now on
    return value
