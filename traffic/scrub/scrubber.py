"""The scrubber: every detector's spans merged, each replaced by a stable placeholder.

``scrub(text)`` runs the hand-written rules (:mod:`traffic.scrub.rules`) and the chosen
detect-secrets plugins (:mod:`traffic.scrub.plugins`) on the original text, then:

1. drops spans inside a placeholder already in the text (so scrubbing is idempotent, and a
   model's answer that quotes a placeholder keeps it), and secret spans that stand in for a
   secret (``YOUR_API_KEY``, ``sk-...``, ``xxxxxx``, ``****``, ``<password>``, ``${VAR}``,
   ``process.env.X``, a phrase such as ``replace-with-a-long-random-string`` but a password's
   passphrase), and values vendors document or publish (the jwt.io sample, ``pk_live_``);
2. merges overlapping secret spans into one, named by the most specific kind among them
   (:data:`KIND_PRIORITY`: a JWT after ``Bearer`` is a ``jwt``, an ``sk-proj-`` key
   assigned to ``api_key`` is an ``openai_key``);
3. drops PII spans that overlap a secret (``postgres://u:pw@db.internal`` is a password, not
   the email ``pw@db.internal``), and merges overlapping PII spans;
4. replaces each span, left to right, with ``<SECRET_{KIND}_{n}>`` (secrets) or
   ``<{KIND}_{n}>`` (PII: ``EMAIL``, ``PHONE``, ``IP``, ``CREDIT_CARD``), ``n`` counting the
   distinct values of that kind from 1; the same value gets the same placeholder throughout
   the text (:class:`Placeholders`, which can also number several texts as one).

The result carries each finding (kind, span in the original text, placeholder, value), so a
caller can put placeholders on a request and :func:`restore` the originals in the answer.
Which detector covers which kind, and the figures behind it: :data:`LIBRARY_PLUGINS` and
docs/secrets.md.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from traffic.scrub import plugins, rules
from traffic.scrub.rule import passphrase
from traffic.scrub.rules import PII_KINDS, Detection

# Most specific first: the kind an overlap of several detections is named by.
KIND_PRIORITY: tuple[str, ...] = (
    "private_key_pem",
    "anthropic_key",
    "openai_key",
    "github_token",
    "gitlab_token",
    "slack_webhook",
    "slack_token",
    "stripe_key",
    "aws_access_key",
    "google_api_key",
    "huggingface_token",
    "sendgrid_key",
    "npm_token",
    "pypi_token",
    "azure_storage_key",
    "telegram_bot_token",
    "discord_bot_token",
    "mailchimp_key",
    "square_oauth",
    "twilio_key",
    "azure_client_secret",
    "digitalocean_token",
    "shopify_token",
    "groq_key",
    "replicate_token",
    "postman_key",
    "linear_key",
    "databricks_token",
    "newrelic_key",
    "jwt",
    "aws_secret",
    "password_in_url",
    "basic_auth",
    "bearer_token",
    "session_cookie",
    "password",
    "generic_secret",
    "credit_card",
    "email",
    "phone",
    "ip",
)
_RANK = {kind: i for i, kind in enumerate(KIND_PRIORITY)}

# detect-secrets plugins the scrubber runs beside the hand-written rules. Measured alone on
# tests/data/secrets_corpus (scripts/secrets_eval.py --plugins; docs/secrets.md), the tuning
# corpus's 406 secrets / 672 lookalikes, after the stand-in filter below:
#   adds recall the rules lack, no false positive:
#     basic_auth_url  password_in_url 31/31 (rules 17/31, and only via an assigned name)
#     keyword         password 26/28 (rules 12/28: unquoted YAML/.env values); on the held-out
#                     set it flagged type annotations (``api_key: SecretStr``) until values
#                     with whitespace or only letters were dropped (plugins._credential_shaped)
#     slack           slack_webhook 14/14 (rules 0)     sendgrid   sendgrid_key 13/13 (rules 0)
#     azure_storage   azure_storage_key 7/7 (rules 0)   telegram   telegram_bot_token 7/7 (0)
#     discord         discord_bot_token 5/5 held out (rules 0)
#   formats the rules do not name, no false positive measured (kept for their coverage):
#     aws (ABIA/ACCA/A3T keys, a secret quoted near "aws"), gitlab (gldt-, glrt-, glcbt-...),
#     mailchimp, npm, pypi, square_oauth
# Left out: github, openai, stripe, jwt (the rules catch every one of these, whole; the
# plugins report a prefix or miss ``sk-proj-`` keys and ``github_pat_``), private_key (its
# span is the BEGIN line, the key body would stay), twilio (0/7: flags account SIDs),
# Base64/Hex high-entropy strings (precision 0.47 and 0.16; they touch 90 of 672 lookalikes:
# every package-lock integrity hash, 21 of 91 sha256s, 14 of 45 md5s), public IPv4 (the
# rules' ip covers it).
LIBRARY_PLUGINS: tuple[str, ...] = (
    "basic_auth_url",
    "keyword",
    "slack",
    "sendgrid",
    "azure_storage",
    "telegram",
    "discord",
    "aws",
    "gitlab",
    "mailchimp",
    "npm",
    "pypi",
    "square_oauth",
)

PLACEHOLDER = re.compile(r"<(?:SECRET_[A-Z0-9_]+?|EMAIL|IP|PHONE|CREDIT_CARD)_\d+>")

# A secret-shaped value that stands for one: documentation placeholders (``YOUR_API_KEY``,
# ``sk-...``, ``ghp_xxxx...``, ``AKIA...EXAMPLE``, ``********``) and references to where the
# real one lives (``${JWT_SECRET}``, ``process.env.X``, ``os.environ[...]``).
_STAND_IN = re.compile(
    r"([xX#.-])\1{5}|\*{3}|\.\.\.|\u2026|EXAMPLE|\$\{|\{\{|%\(|process\.env|os\.environ|getenv"
    r"|<[\w .-]{1,40}>"
    r"|(?i:your[_-]|replace[_-]?me|change[_-]?me|placeholder|redacted)"
)
# A whole value that is a phrase of three or more words in one case, without a digit
# (``replace-with-a-long-random-string``, ``not_a_real_secret``): an instruction, not a key,
# unless it is a passphrase (no instruction word in it: ``violet-harbor-quartz-prism``).
_PHRASE = re.compile(r"[a-z]+(?:[-_][a-z]+){2,}|[A-Z]+(?:[-_][A-Z]+){2,}")


def _instruction(text: str, d: Detection) -> bool:
    """A phrase, unless it is a password's passphrase."""
    if _PHRASE.fullmatch(text, d.start, d.end) is None:
        return False
    return d.kind != "password" or not passphrase(text[d.start : d.end])


# Identifiers vendors publish to browsers and apps, whatever name holds them: Mapbox's
# public tokens, Stripe's publishable keys, Square's application ids.
_PUBLIC = re.compile(r"pk\.eyJ|pk_(?:live|test)_|sq0idp-")

# Credentials vendors print in their documentation and emulators ship with: public, shared by
# every user of the docs (the jwt.io debugger's sample signature, Azurite's account key,
# Stripe's documented test keys). A span holding one is not a secret.
_DOCUMENTED = re.compile(
    r"SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    r"|Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
    r"|sk_test_4eC39HqLyjWDarjtT1zdp7dc|sk_test_BQokikJOvBiI2HlWgH4olfQ2"
)


def category(kind: str) -> str:
    """``secret`` for every secret kind, else the PII kind itself (``email``, ``ip``...)."""
    return kind if kind in PII_KINDS else "secret"


@dataclass(frozen=True, slots=True)
class Finding:
    """A span of the original text, its kind and the placeholder that replaced it."""

    kind: str
    start: int
    end: int
    placeholder: str
    value: str = field(repr=False)  # the original text: kept out of logs and reprs

    @property
    def category(self) -> str:
        return category(self.kind)


@dataclass(frozen=True, slots=True)
class Scrubbed:
    """A scrubbed text and what was replaced in it, in text order."""

    text: str
    findings: tuple[Finding, ...]

    def counts(self) -> Counter[str]:
        """Findings per category (``secret``, ``email``, ``credit_card``, ``ip``, ``phone``)."""
        return Counter(f.category for f in self.findings)


def _rank(kind: str) -> int:
    return _RANK.get(kind, len(KIND_PRIORITY))


def _merge(detections: Iterable[Detection]) -> list[Detection]:
    """Overlapping detections joined into one span named by the most specific kind."""
    merged: list[Detection] = []
    for d in sorted(detections, key=lambda d: (d.start, -d.end)):
        if merged and d.start < merged[-1].end:
            last = merged[-1]
            kind = last.kind if _rank(last.kind) <= _rank(d.kind) else d.kind
            merged[-1] = Detection(last.start, max(last.end, d.end), kind)
        else:
            merged.append(d)
    return merged


class _Spans:
    """Sorted, non-overlapping spans, asked whether a span overlaps one of them."""

    def __init__(self, spans: list[Detection]) -> None:
        self.spans = spans
        self.ends = [s.end for s in spans]

    def overlaps(self, d: Detection) -> bool:
        i = bisect.bisect_right(self.ends, d.start)  # the first span ending after d starts
        return i < len(self.spans) and self.spans[i].start < d.end


def detect(text: str, *, pii: bool = True) -> list[Detection]:
    """The spans :func:`scrub` replaces, in text order, never overlapping; ``pii=False``: the
    secrets alone (the same spans, without running the PII rules: the gateway's request path)."""
    found = rules.detect(text, pii=pii) + plugins.detect(text, LIBRARY_PLUGINS)
    held = _Spans([Detection(m.start(), m.end(), "held") for m in PLACEHOLDER.finditer(text)])
    secrets = _merge(
        d
        for d in found
        if d.kind not in PII_KINDS
        and not held.overlaps(d)
        and not _STAND_IN.search(text, d.start, d.end)
        and not _instruction(text, d)
        and not _DOCUMENTED.search(text, d.start, d.end)
        and not _PUBLIC.match(text, d.start, d.end)
    )
    taken = _Spans(secrets)
    personal = _merge(
        d for d in found if d.kind in PII_KINDS and not held.overlaps(d) and not taken.overlaps(d)
    )
    return sorted(secrets + personal, key=lambda d: d.start)


class Placeholders:
    """The placeholders of one or several texts (the messages of one request): a value gets one
    placeholder in all of them, ``n`` counts the distinct values of each kind from 1, and a
    placeholder already written in any of them (``in_use``) is never given to a new value."""

    def __init__(self, in_use: Iterable[str] = ()) -> None:
        self._in_use = set(in_use)
        self._by_value: dict[str, str] = {}
        self._per_kind: Counter[str] = Counter()

    def placeholder(self, value: str, kind: str) -> str:
        """The placeholder of ``value``, numbered now if it has none yet."""
        placeholder = self._by_value.get(value)
        if placeholder is None:
            label = kind.upper() if kind in PII_KINDS else f"SECRET_{kind.upper()}"
            while placeholder is None or placeholder in self._in_use:
                self._per_kind[kind] += 1
                placeholder = f"<{label}_{self._per_kind[kind]}>"
            self._by_value[value] = placeholder
        return placeholder

    def replace(self, text: str, spans: Iterable[Detection]) -> Scrubbed:
        """``text`` with each of ``spans`` (in text order, never overlapping: :func:`detect`'s)
        replaced by its value's placeholder."""
        pieces: list[str] = []
        findings: list[Finding] = []
        done = 0
        for d in spans:
            value = text[d.start : d.end]
            placeholder = self.placeholder(value, d.kind)
            pieces += (text[done : d.start], placeholder)
            findings.append(Finding(d.kind, d.start, d.end, placeholder, value))
            done = d.end
        if not findings:
            return Scrubbed(text, ())
        pieces.append(text[done:])
        return Scrubbed("".join(pieces), tuple(findings))


def scrub(text: str) -> Scrubbed:
    """``text`` with every secret and PII span replaced by its placeholder (module docstring).

    Deterministic and idempotent: scrubbing the output again finds nothing. Numbers already
    used by placeholders in ``text`` are skipped, so a new value never takes the placeholder
    of an older one quoted in the same text.
    """
    spans = detect(text)
    if not spans:
        return Scrubbed(text, ())
    return Placeholders(PLACEHOLDER.findall(text)).replace(text, spans)


def restore(text: str, findings: Iterable[Finding]) -> str:
    """``text`` (an answer to a scrubbed request) with each placeholder of ``findings``
    replaced by its original value; other placeholders and text are left as they are."""
    values = {f.placeholder: f.value for f in findings}
    if not values:
        return text
    return PLACEHOLDER.sub(lambda m: values.get(m.group(0), m.group(0)), text)
