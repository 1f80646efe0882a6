"""What a hand-written detector is: a regular expression, the span of a match to report (or
none), the kind it names, and where it may start, so that it is tried only there.

A rule with ``anchors`` (lowercase literals at which every match starts) is tried with
``pattern.match`` at each occurrence of one, found with ``str.find``, instead of at every
position (Python's ``re`` is slow at that); a rule without anchors can have a ``gate``, a cheap
necessary condition on the text. :func:`run` applies one rule; :mod:`traffic.scrub.rules`
holds the rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Detection:
    """``text[start:end]`` looks like a ``kind`` (``github_token``, ``email``...)."""

    start: int
    end: int
    kind: str


# Returns the (start, end) to report for a match, or None to keep the match.
SpanOf = Callable[[re.Match[str]], tuple[int, int] | None]


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    span: SpanOf
    # The kind, or a function of the match for rules that name several kinds.
    kind: str | Callable[[re.Match[str]], str]
    # Lowercase literals at which every match starts.
    anchors: tuple[str, ...] = ()
    # Cheap necessary condition on the text, for rules without anchors.
    gate: Callable[[str], bool] | None = None


def whole(check: Callable[[str], bool] | None = None) -> SpanOf:
    """Report the whole match, when ``check`` (if any) accepts it."""
    return lambda m: m.span() if check is None or check(m.group(0)) else None


def group(name: str, check: Callable[[str], bool] | None = None) -> SpanOf:
    """Report only the named group (the value after a name, ``Bearer`` or ``Basic``)."""

    def span(m: re.Match[str]) -> tuple[int, int] | None:
        value = m.group(name)
        if value is None or (check is not None and not check(value)):
            return None
        return m.span(name)

    return span


_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")


def letters_and_digits(value: str) -> bool:
    return _DIGIT.search(value) is not None and _LETTER.search(value) is not None


def token_like(value: str) -> bool:
    """A digit, or both cases: ``ghp_xxxx...`` and ``AKIAXXXX...`` placeholders are not."""
    if _DIGIT.search(value) is not None:
        return True
    return any(c.isupper() for c in value) and any(c.islower() for c in value)


# An attribute chain ending in a secret word (``settings.DB_PASSWORD``, ``self.api_key``).
_REFERENCE = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+", flags=re.ASCII)
_SECRET_WORD = re.compile(r"(?i)pass|pwd|secret|token|key|cred|auth")


def secret_reference(value: str) -> bool:
    """``value`` names where a secret is kept (an attribute chain ending in a secret word)
    rather than being one."""
    return bool(_REFERENCE.fullmatch(value)) and bool(_SECRET_WORD.search(value.rpartition(".")[2]))


def _anchor_positions(lower: str, anchors: tuple[str, ...]) -> list[int]:
    positions: set[int] = set()
    for anchor in anchors:
        at = lower.find(anchor)
        while at != -1:
            positions.add(at)
            at = lower.find(anchor, at + 1)
    return sorted(positions)


@dataclass(frozen=True)
class Family:
    """Rules that each start at their own anchors (vendor prefixes), run as one: each anchor is
    found once, and where it occurs only the rules registered for it are tried. Run one by
    one, forty rules paid forty times the per-rule overhead on a short request, and one
    alternation of them all was tried whole at every anchor."""

    rules: tuple[Rule, ...]
    index: dict[str, tuple[Rule, ...]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[str, list[Rule]] = {}
        for rule in self.rules:
            for anchor in rule.anchors:
                index.setdefault(anchor, []).append(rule)
        object.__setattr__(self, "index", {a: tuple(r) for a, r in index.items()})


def _run_family(family: Family, text: str, lower: str) -> list[Detection]:
    if len(lower) != len(text):  # lowercasing moved offsets (rare scripts): rule by rule
        return [d for rule in family.rules for d in run(rule, text, lower)]
    found: list[Detection] = []
    for anchor, rules in family.index.items():
        at = lower.find(anchor)
        while at != -1:
            for rule in rules:
                m = rule.pattern.match(text, at)
                span = None if m is None else rule.span(m)
                if m is not None and span is not None:
                    kind = rule.kind if isinstance(rule.kind, str) else rule.kind(m)
                    found.append(Detection(span[0], span[1], kind))
            at = lower.find(anchor, at + 1)
    return sorted(found, key=lambda d: d.start)


def run(rule: Rule | Family, text: str, lower: str) -> list[Detection]:
    """``rule``'s accepted matches, left to right, never overlapping one another (a family's:
    each of its rules' matches, in text order)."""
    if isinstance(rule, Family):
        return _run_family(rule, text, lower)
    if rule.gate is not None and not rule.gate(text):
        return []
    if rule.anchors and len(lower) == len(text):
        matches = (rule.pattern.match(text, at) for at in _anchor_positions(lower, rule.anchors))
    else:  # no anchors, or lowercasing moved offsets (rare scripts): scan everywhere
        matches = (m for m in rule.pattern.finditer(text))
    found: list[Detection] = []
    done = 0
    for m in matches:
        if m is None or m.start() < done:
            continue
        span = rule.span(m)
        if span is None:
            continue
        kind = rule.kind if isinstance(rule.kind, str) else rule.kind(m)
        found.append(Detection(span[0], span[1], kind))
        done = m.end()
    return found


_TEMPLATE_MARKS = ("${", "{{", "{%", "#{", "%(", "$(")
_VARIABLE = re.compile(r"\$[A-Za-z_]\w*|%[A-Za-z_]+%|<[^<>]*>|\{[^{}]*\}")


def templated(value: str) -> bool:
    """A template or a reference, not a value: ``${X}``, ``{{ x }}``, ``$X``, ``%X%``, ``<x>``,
    ``{x}``, ``#{x}``, ``%(x)s``, ``$(cmd)``."""
    return any(mark in value for mark in _TEMPLATE_MARKS) or bool(_VARIABLE.fullmatch(value))


# Words that make a phrase an instruction or a stand-in ("replace-with-a-long-random-string",
# "not_a_real_secret", "dev-only-password"), never a chosen passphrase.
_INSTRUCTION_TEXT = """
a an the to of in on for with and or not no your my our their real fake dummy test tests
testing example sample demo placeholder default secret secrets password passwd token key api
value here there this that goes go set change replace insert put use enter fill me it random
string long generate generated todo fixme none null empty nil local dev development only env
environment var variable from file vault manager please must should see read get new old
same keep do dont
"""
_INSTRUCTION_WORDS = frozenset(_INSTRUCTION_TEXT.split())
_PHRASE_WORDS = re.compile(r"[A-Za-z]{3,12}(?:([-_])[A-Za-z]{3,12})(?:\1[A-Za-z]{3,12})+")


def passphrase(value: str) -> bool:
    """Three or more words of letters joined by one separator (``-`` or ``_``), none of
    them an instruction word: a chosen passphrase (``violet-harbor-quartz``), not a stand-in
    (``replace-with-your-key``) nor a name (``my_app_db``)."""
    if _PHRASE_WORDS.fullmatch(value) is None:
        return False
    words = re.split(r"[-_]", value.lower())
    return not any(w in _INSTRUCTION_WORDS for w in words)


# Google's app passwords: four groups of four lowercase letters.
_APP_PASSWORD = re.compile(r"[a-z]{4}(?: [a-z]{4}){3}")


def app_password(value: str) -> bool:
    return _APP_PASSWORD.fullmatch(value) is not None


_DIGIT_OR_SYMBOL = re.compile(r"\d|[^\w.-]")  # "_", "-" and "." join words


def password_shaped(value: str) -> bool:
    """A digit, a symbol, both cases or a passphrase, and not a word, code, a path or a URL."""
    if len(value) < 6 or value[0] in "-/~" or value.startswith("./") or "://" in value:
        return False
    if secret_reference(value):
        return False
    core = value.lstrip("!&*:@")  # YAML tag, anchor, alias; a bind parameter; T-SQL variable
    if not core or core.isalpha():
        return False
    if _DIGIT_OR_SYMBOL.search(core):
        return True
    if passphrase(core):
        return True
    return any(c.isupper() for c in core) and any(c.islower() for c in core)
