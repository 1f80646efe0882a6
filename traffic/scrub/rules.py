"""The hand-written detectors: regular expressions with checks, each match a kind and a span.

Every rule runs on the original text and reports spans; nothing is replaced here
(:mod:`traffic.scrub.scrubber` merges the spans of every detector and writes placeholders).

Secrets
    ``private_key_pem``: a PEM private-key block, BEGIN to END, or to the end of its base64
    lines when the END line is missing (a truncated paste). ``azure_client_secret``: an Azure
    AD client secret (``abc8Q~`` + 31-34). ``bearer_token``: the token after ``Bearer`` or
    ``Authorization: token`` (``HTTP_AUTHORIZATION`` too); ``basic_auth``: the value after
    ``Authorization: Basic``, or base64 of ``user:password`` in docker's ``"auth": "..."`` and
    npm's ``_auth=``. Vendor formats, webhook and signed URLs, base64 private keys:
    :mod:`traffic.scrub.vendors`. Values under a secret-like name: :mod:`traffic.scrub.named`.
    Tools' password arguments, SQL, credentials passed by position:
    :mod:`traffic.scrub.positional`.
PII
    ``email`` (kept: ``git@`` remotes, reserved example domains: ``example.com/.org/.net``,
    ``*.example``, ``*.test``, ``*.invalid``, ``*.localhost``; Google service accounts; the
    ``user@host`` of ssh, scp, sftp, rsync); ``credit_card`` (13-19 digits in card groupings,
    a known issuer prefix and a valid Luhn sum); ``ip`` (IPv6 validated by :mod:`ipaddress`;
    IPv4 dotted quads without leading zeros; kept: loopback, unspecified, netmasks, RFC 1918
    addresses, and a quad after a version context such as ``v``, ``version``, ``==``, ``@``);
    ``phone`` (``+`` international with 8-15 digits, North-American ``NXX-XXX-XXXX`` or
    ``(NXX) XXX-XXXX``, or 7-15 digits right after a phone keyword; bare digit runs are ids).

Not detected here: names, postal addresses, secrets without a known prefix that are not
under a secret-like name or in a credential's place, passwords inside URLs with a user
(detect-secrets' rule does that: :mod:`traffic.scrub.plugins`).
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable

from traffic.scrub.named import NAMED_RULES
from traffic.scrub.positional import POSITIONAL_RULES
from traffic.scrub.rule import Detection, Rule, group, run, token_like, whole
from traffic.scrub.vendors import VENDOR_RULES

__all__ = ["PII_KINDS", "Detection", "detect", "luhn_valid"]

PII_KINDS = frozenset({"email", "credit_card", "ip", "phone"})


# ---------------------------------------------------------------- secrets

# An Azure AD client secret: three characters, a digit, ``Q~``, then 31 to 34.
_AZURE_CLIENT_SECRET = re.compile(
    r"(?<![\w~.-])[\w~.-]{3}\dQ~[\w~.-]{31,34}(?![\w~.-])", flags=re.ASCII
)


# A registry credential: base64 of ``user:password`` (docker's config.json ``"auth"``,
# npm's ``_auth=``).
_AUTH_CONFIG = re.compile(
    r"(?i)(?:\"auth\"\s*:\s*\"|_auth\s*=\s*)(?P<value>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])"
)


def _user_and_password(value: str) -> bool:
    try:
        decoded = base64.b64decode(value, validate=True).decode()
    except (binascii.Error, ValueError):
        return False
    user, colon, password = decoded.partition(":")
    return bool(user and colon and password) and decoded.isprintable()


# ---------------------------------------------------------------- email

# Patterns start with a character class and check the character before it with a lookbehind
# after the first one: re can then skip ahead to candidate characters quickly.
_EMAIL = re.compile(
    r"(?P<local>[A-Za-z0-9](?<![A-Za-z0-9._%+-][A-Za-z0-9])[A-Za-z0-9._%+-]*)@"
    r"(?P<domain>(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24})(?![A-Za-z0-9-])"
)
_RESERVED_DOMAIN = re.compile(
    r"(?i)(?:^|\.)(?:example\.(?:com|org|net)|[^.]+\.(?:example|test|invalid|localhost))$"
    r"|^(?:example|test|invalid|localhost)$"
)


# Machine identities (a Google service account) and a host after ssh/scp/sftp/rsync
# (``ssh deploy@bastion``: a login, not a mailbox).
_SERVICE_DOMAIN = re.compile(r"(?i)\.gserviceaccount\.com$")
_SSH_BEFORE = re.compile(r"\b(?:ssh|scp|sftp|rsync|mosh)\b[^\n|;&]{0,80}\s$")


def _email(m: re.Match[str]) -> tuple[int, int] | None:
    domain = m.group("domain")
    if m.group("local").lower() == "git" or _RESERVED_DOMAIN.search(domain):
        return None
    if _SERVICE_DOMAIN.search(domain) or _SSH_BEFORE.search(
        m.string, max(0, m.start() - 100), m.start()
    ):
        return None
    return m.span()


# ---------------------------------------------------------------- credit cards

_CARD = re.compile(
    r"\d(?<![\w.-]\d)(?:\d{12,18}"
    r"|\d{3}(?P<s1>[ -])\d{4}(?P=s1)\d{4}(?P=s1)\d{4}(?:(?P=s1)\d{3})?"
    r"|\d{3}(?P<s2>[ -])\d{6}(?P=s2)\d{4,5})(?![\w-]|\.\d)"
)
_ISSUER = re.compile(
    r"^(?:4|5[1-5]|2(?:2[2-9]|[3-6]\d|7[01]|720)|3[47]|6(?:011|4[4-9]|5)|35|3[068])"
)


def luhn_valid(digits: str) -> bool:
    """True when ``digits`` passes the Luhn checksum used by payment card numbers."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        d = int(char)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(m: re.Match[str]) -> tuple[int, int] | None:
    digits = re.sub(r"[ -]", "", m.group(0))
    if 13 <= len(digits) <= 19 and _ISSUER.match(digits) and luhn_valid(digits):
        return m.span()
    return None


# ---------------------------------------------------------------- IP addresses

_IPV6 = re.compile(
    r"(?<![\w:.])(?=[0-9A-Fa-f]*:[0-9A-Fa-f]*:)[0-9A-Fa-f:]{2,39}"
    r"(?:(?<=:)(?:\d{1,3}\.){3}\d{1,3})?(?![\w:]|\.\d)"
)
_IPV4 = re.compile(r"\d(?<![\w.]\d)\d{0,2}\.\d{1,3}\.\d{1,3}\.\d{1,3}(?![\w]|\.\d)")
# Necessary conditions, cheap because they start with a literal: an address without "::" has
# seven colons, so it holds ":h:h:"; a dotted quad holds ".d.d".
_IPV6_GATE = re.compile(r":[0-9A-Fa-f]{1,4}:[0-9A-Fa-f]{1,4}:")
_IPV4_GATE = re.compile(r"\.\d{1,3}\.\d")
_VERSION_CONTEXT = re.compile(
    r"(?i)(?:\b(?:v|version|ver|release|build|rev)\s*[:=(]?\s*[\"']?|(?:==|>=|<=|~=|!=|\^|~|@)\s*)$"
)


def _ipv6(m: re.Match[str]) -> tuple[int, int] | None:
    text = m.group(0)
    try:
        address = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    groups = [g for g in text.split(":") if g]
    has_hex_letter = any(c in "abcdefABCDEF" for c in text)
    if not any(c.isdigit() for c in text) or (len(groups) < 3 and not has_hex_letter):
        return None
    if address.is_loopback or address.is_unspecified:
        return None
    return m.span()


_RFC1918 = tuple(
    ipaddress.IPv4Network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)


def _rfc1918(address: ipaddress.IPv4Address) -> bool:
    """A private network's address (every network reuses them): not personal data."""
    return any(address in network for network in _RFC1918)


def _ipv4(m: re.Match[str]) -> tuple[int, int] | None:
    text = m.group(0)
    octets = text.split(".")
    if any(len(o) > 1 and o.startswith("0") for o in octets):
        return None
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        return None
    value = int(address)
    inverted = ~value & 0xFFFFFFFF
    is_netmask = octets[0] == "255" and (inverted & (inverted + 1)) == 0
    if address.is_loopback or address.is_unspecified or is_netmask or _rfc1918(address):
        return None
    if _VERSION_CONTEXT.search(m.string[max(0, m.start() - 24) : m.start()]):
        return None
    return m.span()


# ---------------------------------------------------------------- phone numbers

_PHONE_INTL = re.compile(r"\+(?<![\w+]\+)\d{1,3}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?![\w-]|\.\d)")
_PHONE_NANP = re.compile(
    r"[2-9(](?<![\w.+-][2-9(])(?:(?<=\()[2-9]\d{2}\)\s?|(?<=[2-9])\d{2}(?P<sep>[-. ]))\d{3}"
    r"(?(sep)(?P=sep)|[-. ])\d{4}(?![\w-]|\.\d)"
)
_PHONE_KEYWORD = re.compile(
    r"(?i)\b(?:phone|tel|telephone|mobile|cell|fax|whatsapp)\b(?:\s*(?:number|no\.?|#))?"
    r"\s*[:=]?\s*(?P<number>\+?\(?\d[\d ().-]{5,20}\d)(?![\w-])"
)


def _digit_count_between(low: int, high: int) -> Callable[[str], bool]:
    return lambda text: low <= sum(c.isdigit() for c in text) <= high


_PEM = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*)PRIVATE KEY( BLOCK)?-----"
    r"(?:[\s\S]*?-----END (?P=label)PRIVATE KEY( BLOCK)?-----"
    r"|(?:[ \t]*\r?\n[ \t]*(?:[A-Za-z0-9+/=]{16,}|[A-Za-z-]+: [^\n]*))*)"
)

_RULES = (
    Rule(_PEM, whole(), "private_key_pem", anchors=("-----begin",)),
    *VENDOR_RULES,
    Rule(
        re.compile(r"(?i)\bbearer\s+(?P<token>[A-Za-z0-9._~+/=-]{16,})(?![A-Za-z0-9._~+/=-])"),
        group("token", token_like),
        "bearer_token",
        anchors=("bearer",),
    ),
    Rule(
        re.compile(
            r"(?i)(?<![a-z])authorization[\"']?\s*[:=]\s*[\"']?(?P<scheme>basic|token)\s+"
            r"(?P<token>[A-Za-z0-9._~+/=-]{8,})"
        ),
        group("token"),
        lambda m: "basic_auth" if m.group("scheme").lower() == "basic" else "bearer_token",
        anchors=("authorization",),
    ),
    Rule(
        _AUTH_CONFIG,
        group("value", _user_and_password),
        "basic_auth",
        anchors=('"auth"', "_auth"),
    ),
    Rule(_AZURE_CLIENT_SECRET, whole(), "azure_client_secret", gate=lambda text: "Q~" in text),
    *NAMED_RULES,
    *POSITIONAL_RULES,
    Rule(_EMAIL, _email, "email", gate=lambda text: "@" in text),
    Rule(_CARD, _card, "credit_card"),
    Rule(_IPV6, _ipv6, "ip", gate=lambda t: "::" in t or _IPV6_GATE.search(t) is not None),
    Rule(_IPV4, _ipv4, "ip", gate=lambda text: _IPV4_GATE.search(text) is not None),
    Rule(
        _PHONE_INTL,
        whole(_digit_count_between(8, 15)),
        "phone",
        gate=lambda text: "+" in text,
    ),
    Rule(
        _PHONE_KEYWORD,
        group("number", _digit_count_between(7, 15)),
        "phone",
        anchors=("phone", "tel", "mobile", "cell", "fax", "whatsapp"),
    ),
    Rule(_PHONE_NANP, whole(), "phone"),
)


_SECRET_RULES = tuple(
    r
    for r in _RULES
    if not (isinstance(r, Rule) and isinstance(r.kind, str) and r.kind in PII_KINDS)
)


def detect(text: str, *, pii: bool = True) -> list[Detection]:
    """Every span the hand-written rules find in ``text``, rule by rule (spans may overlap
    across rules: a bearer token that is a JWT is reported by both); ``pii=False``: secrets
    only (the PII rules are not run)."""
    lower = text.lower()
    return [d for rule in (_RULES if pii else _SECRET_RULES) for d in run(rule, text, lower)]
