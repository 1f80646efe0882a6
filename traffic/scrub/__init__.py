"""Secrets and PII out of text: one scrubber for every training-data path and the gateway.

:func:`scrub` finds secrets (vendor API keys and tokens, private keys, JWTs, passwords in URLs,
on command lines and assigned to secret-like names) and PII (emails, card numbers, IP
addresses, phone numbers), replaces each with a stable placeholder (``<SECRET_GITHUB_TOKEN_1>``,
``<EMAIL_2>``: the same value, the same placeholder within a text) and returns the findings,
so that an answer to a scrubbed request can have the originals put back (:func:`restore`).

Modules: ``rules`` (the hand-written detectors), ``plugins`` (detect-secrets' maintained
plugins as span detectors), ``scrubber`` (merging their spans, the placeholders). Which
detector covers which kind, and the measurements behind the choice: docs/secrets.md.
"""

from __future__ import annotations

from traffic.scrub.scrubber import PII_KINDS, Finding, Scrubbed, category, detect, restore, scrub

__all__ = ["PII_KINDS", "Finding", "Scrubbed", "category", "detect", "restore", "scrub"]
