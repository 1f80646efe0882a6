"""PII and secret scrubbing for exported text, with counts per kind.

Rules run in this order (earlier replacements are never re-matched, placeholders contain no
digits or ``@``), each replacing the match with a stable placeholder:

``secret`` -> ``<SECRET>``
    PEM private-key blocks; vendor token formats (``sk-...``, ``sk-ant-...``, ``sk_live_...``,
    ``AKIA``/``ASIA`` + 16, ``ghp_``/``gho_``/``ghu_``/``ghs_``/``ghr_``, ``github_pat_``,
    ``glpat-``, ``xox[abposr]-``, ``AIza`` + 35, ``hf_``); JWTs (``eyJ...eyJ...sig``);
    ``Bearer <token>`` (the word ``Bearer`` is kept); ``Authorization: Basic|token <value>``;
    a value assigned to a name that *ends* in a secret keyword (``api_key``, ``token``,
    ``secret``, ``password``, ``access_key_id``, ...), with ``=``, ``:``, ``:=`` or ``=>``:
    a quoted value of 8+ characters without whitespace or template markers (``${``, ``{{``,
    ``<``), or an unquoted value of 16+ ``[A-Za-z0-9+/=_-]`` holding both a letter and a digit.
    The name and quotes are kept: ``api_key = "<SECRET>"``.
``email`` -> ``<EMAIL>``
    ``local@domain.tld``. Kept: ``git@`` SSH remotes and the reserved example domains
    (``example.com/.org/.net``, ``*.example``, ``*.test``, ``*.invalid``, ``*.localhost``).
``credit_card`` -> ``<CREDIT_CARD>``
    13-19 digits, contiguous or in 4-4-4-4(-3), 4-6-5 or 4-6-4 groups with one separator kind,
    a known issuer prefix (Visa, Mastercard, Amex, Discover, JCB, Diners) and a valid Luhn sum.
``ip`` -> ``<IP>``
    IPv6 (validated by :mod:`ipaddress`; needs a digit, and either 3+ groups or a hex letter, so
    slices such as ``a[1::2]`` and C++ ``dead::beef`` stay) and IPv4 dotted quads without
    leading zeros. Kept: loopback, unspecified (``0.0.0.0``, ``::``) and netmasks
    (``255.255.255.0``). A dotted quad is *ambiguous* with a four-part version number; it is
    treated as an address unless a version context precedes it (``v``, ``version``, ``ver``,
    ``release``, ``build``, ``==``, ``>=``, ``~=``, ``^``, ``@`` ...). Longer dotted runs
    (OIDs, ``1.2.3.4.5``) are never addresses.
``phone`` -> ``<PHONE>``
    ``+`` international numbers with 8-15 digits; North-American ``NXX-XXX-XXXX`` (area code
    2-9) with a consistent separator or ``(NXX) XXX-XXXX``; any 7-15 digit run with separators
    right after a phone keyword (``phone``, ``tel``, ``mobile``, ``cell``, ``fax``, ``whatsapp``).
    Bare digit runs (``4155550123``) are *not* phones: they are indistinguishable from ids and
    timestamps. Digit groups inside hyphenated tokens (UUIDs, dates, hex colours) never match.

Not detected: names, postal addresses, other free-form PII, secrets without a known prefix and
not assigned to a secret-like name; domestic phones outside North America need a ``+`` or a
keyword; ``a@b.cd`` in code (matrix product without spaces) reads as an email.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from traffic.export.turns import AssistantTurn, ToolCall

PLACEHOLDERS: Mapping[str, str] = MappingProxyType(
    {
        "secret": "<SECRET>",
        "email": "<EMAIL>",
        "credit_card": "<CREDIT_CARD>",
        "ip": "<IP>",
        "phone": "<PHONE>",
    }
)


@dataclass(frozen=True)
class _Rule:
    kind: str
    pattern: re.Pattern[str]
    # Returns the replacement for a match, or None to keep the match as it is.
    replace: Callable[[re.Match[str]], str | None]
    # Lowercase literals at which every match starts: the pattern is then only tried there,
    # found with str.find, instead of at every position (Python's re is slow at that).
    anchors: tuple[str, ...] = ()
    # Cheap necessary condition on the text, for rules without anchors.
    gate: Callable[[str], bool] | None = None


def _whole(kind: str) -> Callable[[re.Match[str]], str | None]:
    return lambda m: PLACEHOLDERS[kind]


def _group(
    kind: str, group: str, check: Callable[[str], bool] | None = None
) -> Callable[[re.Match[str]], str | None]:
    """Replace only the named group, keeping the text around it (names, quotes, ``Bearer``)."""

    def replace(m: re.Match[str]) -> str | None:
        value = m.group(group)
        if check is not None and not check(value):
            return None
        start, end = m.start(group) - m.start(), m.end(group) - m.start()
        whole = m.group(0)
        return whole[:start] + PLACEHOLDERS[kind] + whole[end:]

    return replace


def _letters_and_digits(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _token_like(value: str) -> bool:
    has_digit = any(c.isdigit() for c in value)
    mixed_case = any(c.isupper() for c in value) and any(c.islower() for c in value)
    return has_digit or mixed_case


# ---------------------------------------------------------------- secrets

_B = r"(?<![A-Za-z0-9_-])"  # token start boundary
_E = r"(?![A-Za-z0-9_-])"  # token end boundary
_VENDOR_TOKENS = (
    r"sk-ant-[A-Za-z0-9_-]{20,}",
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",
    r"gh[pousr]_[A-Za-z0-9]{36,}",
    r"github_pat_[A-Za-z0-9_]{22,}",
    r"glpat-[A-Za-z0-9_-]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",
    r"AIza[0-9A-Za-z_-]{35}",
    r"hf_[A-Za-z0-9]{30,}",
    r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}",
)
# The name must END with one of these (any prefix: client_secret, GITHUB_TOKEN, db_password);
# matching starts at the keyword, since scanning for the name's start is slow.
_SECRET_NAME = (
    r"(?:api[_-]?key|apikey|secret(?:[_-]?key)?|token|passw(?:or)?d|pwd"
    r"|access[_-]?key(?:[_-]?id)?|private[_-]?key|credentials?)"
)
_ASSIGNED_SECRET = re.compile(
    r"(?i)" + _SECRET_NAME + r"[\"']?\s*(?::=|=>|[:=])\s*"
    r"(?:(?P<q>[\"'`])(?P<quoted>[^\s\"'`<>${}]{8,})(?P=q)"
    r"|(?P<bare>[A-Za-z0-9+/=_-]{16,})(?=$|[\s,;&)\]}]))"
)


def _assigned_secret(m: re.Match[str]) -> str | None:
    group = "quoted" if m.group("quoted") is not None else "bare"
    check = None if group == "quoted" else _letters_and_digits
    return _group("secret", group, check)(m)


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


def _email(m: re.Match[str]) -> str | None:
    if m.group("local").lower() == "git" or _RESERVED_DOMAIN.search(m.group("domain")):
        return None
    return PLACEHOLDERS["email"]


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


def _card(m: re.Match[str]) -> str | None:
    digits = re.sub(r"[ -]", "", m.group(0))
    if 13 <= len(digits) <= 19 and _ISSUER.match(digits) and luhn_valid(digits):
        return PLACEHOLDERS["credit_card"]
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


def _ipv6(m: re.Match[str]) -> str | None:
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
    return PLACEHOLDERS["ip"]


def _ipv4(m: re.Match[str]) -> str | None:
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
    if address.is_loopback or address.is_unspecified or is_netmask:
        return None
    if _VERSION_CONTEXT.search(m.string[max(0, m.start() - 24) : m.start()]):
        return None
    return PLACEHOLDERS["ip"]


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


def _phone_intl(m: re.Match[str]) -> str | None:
    return PLACEHOLDERS["phone"] if _digit_count_between(8, 15)(m.group(0)) else None


_RULES = (
    _Rule(
        "secret",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z0-9 ]*PRIVATE KEY-----"
        ),
        _whole("secret"),
        anchors=("-----begin",),
    ),
    _Rule(
        "secret",
        re.compile(_B + "(?:" + "|".join(_VENDOR_TOKENS) + ")" + _E),
        lambda m: PLACEHOLDERS["secret"] if _letters_and_digits(m.group(0)) else None,
        anchors=("sk-", "sk_", "rk_", "akia", "asia", "gh", "glpat-", "xox", "aiza", "hf_", "eyj"),
    ),
    _Rule(
        "secret",
        re.compile(r"(?i)\bbearer\s+(?P<token>[A-Za-z0-9._~+/=-]{16,})(?![A-Za-z0-9._~+/=-])"),
        _group("secret", "token", _token_like),
        anchors=("bearer",),
    ),
    _Rule(
        "secret",
        re.compile(
            r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?(?:basic|token)\s+"
            r"(?P<token>[A-Za-z0-9._~+/=-]{8,})"
        ),
        _group("secret", "token"),
        anchors=("authorization",),
    ),
    _Rule(
        "secret",
        _ASSIGNED_SECRET,
        _assigned_secret,
        anchors=("api", "secret", "token", "passw", "pwd", "access", "private", "credential"),
    ),
    _Rule("email", _EMAIL, _email, gate=lambda text: "@" in text),
    _Rule("credit_card", _CARD, _card),
    _Rule(
        "ip", _IPV6, _ipv6, gate=lambda text: "::" in text or _IPV6_GATE.search(text) is not None
    ),
    _Rule("ip", _IPV4, _ipv4, gate=lambda text: _IPV4_GATE.search(text) is not None),
    _Rule("phone", _PHONE_INTL, _phone_intl, gate=lambda text: "+" in text),
    _Rule(
        "phone",
        _PHONE_KEYWORD,
        _group("phone", "number", _digit_count_between(7, 15)),
        anchors=("phone", "tel", "mobile", "cell", "fax", "whatsapp"),
    ),
    _Rule("phone", _PHONE_NANP, _whole("phone")),
)


def _anchor_positions(lower: str, anchors: tuple[str, ...]) -> list[int]:
    positions: set[int] = set()
    for anchor in anchors:
        at = lower.find(anchor)
        while at != -1:
            positions.add(at)
            at = lower.find(anchor, at + 1)
    return sorted(positions)


def _apply(rule: _Rule, text: str, lower: str, counts: Counter[str]) -> str:
    """``text`` with ``rule``'s accepted matches replaced, left to right, never overlapping;
    ``lower`` is ``text.lower()``."""
    if rule.gate is not None and not rule.gate(text):
        return text
    if rule.anchors and len(lower) == len(text):
        matches = (rule.pattern.match(text, at) for at in _anchor_positions(lower, rule.anchors))
    else:  # no anchors, or lowercasing moved offsets (rare scripts): scan everywhere
        matches = (m for m in rule.pattern.finditer(text))
    pieces: list[str] = []
    done = 0
    for m in matches:
        if m is None or m.start() < done:
            continue
        replacement = rule.replace(m)
        if replacement is None:
            continue
        pieces += (text[done : m.start()], replacement)
        done = m.end()
        counts[rule.kind] += 1
    if not pieces:
        return text
    pieces.append(text[done:])
    return "".join(pieces)


def scrub_text(text: str) -> tuple[str, Counter[str]]:
    """``text`` with every detected PII/secret span replaced by its placeholder, and how many
    spans of each kind (``secret``, ``email``, ``credit_card``, ``ip``, ``phone``) were replaced.

    Deterministic and idempotent: scrubbing the output again changes nothing.
    """
    counts: Counter[str] = Counter()
    lower = text.lower()
    for rule in _RULES:
        scrubbed = _apply(rule, text, lower, counts)
        if scrubbed is not text:
            text, lower = scrubbed, scrubbed.lower()
    return text, counts


TextScrub = Callable[[str], tuple[str, Counter[str]]]


class CachingScrubber:
    """:func:`scrub_text` with a memo of recent texts, for one export run.

    Conversations resend their system prompt and whole history on every turn, so most texts of
    a traffic export have been scrubbed before. The memo holds at most ``max_chars`` characters
    of input and is emptied when full; results are identical to :func:`scrub_text`.
    """

    def __init__(self, max_chars: int = 1 << 23) -> None:
        self._memo: dict[str, tuple[str, Counter[str]]] = {}
        self._chars = 0
        self._max_chars = max_chars

    def __call__(self, text: str) -> tuple[str, Counter[str]]:
        hit = self._memo.get(text)
        if hit is None:
            hit = scrub_text(text)
            if self._chars + len(text) > self._max_chars:
                self._memo.clear()
                self._chars = 0
            self._memo[text] = hit
            self._chars += len(text)
        return hit[0], Counter(hit[1])


def scrub_messages(
    messages: Iterable[dict[str, Any]], scrub: TextScrub = scrub_text
) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Copies of chat ``messages`` with string ``content`` and tool-call ``arguments`` scrubbed
    by ``scrub``.

    Roles, ids, tool names and tool definitions are left alone; the input is not mutated.
    """
    counts: Counter[str] = Counter()
    out: list[dict[str, Any]] = []
    for message in messages:
        copy = dict(message)
        if isinstance(copy.get("content"), str):
            copy["content"], found = scrub(copy["content"])
            counts.update(found)
        if copy.get("tool_calls"):
            calls = []
            for call in copy["tool_calls"]:
                fn = dict(call["function"])
                fn["arguments"], found = scrub(fn["arguments"])
                counts.update(found)
                calls.append({**call, "function": fn})
            copy["tool_calls"] = calls
        out.append(copy)
    return out, counts


def scrub_turn(
    answer: AssistantTurn | None, scrub: TextScrub, counts: Counter[str]
) -> AssistantTurn | None:
    """``answer`` with PII scrubbed from its text and tool-call arguments (found: ``counts``)."""
    if answer is None:
        return None
    content = answer.content
    if content is not None:
        content, found = scrub(content)
        counts.update(found)
    calls = []
    for call in answer.tool_calls:
        arguments, found = scrub(call.arguments)
        counts.update(found)
        calls.append(ToolCall(call.id, call.name, arguments))
    return AssistantTurn(content, tuple(calls))
