"""Secrets known by the name they are given: a value under a secret-like name, in the syntaxes
of code, configuration, command lines and HTTP. The span is the value alone.

Secret names
    A name *ends* in a secret keyword: ``api_key``/``apikey``, ``secret``, ``secret_key``
    (``secret_key_base``), ``token``, ``password``/``passwd``/``pwd``/``passphrase``, ``pass``
    as a word of its own (``ansible_ssh_pass``, ``sshPass``; not ``bypass``),
    ``access_key(_id)``, ``private_key``, ``credential(s)``; or it is a key or a salt named for
    what it does (``signing_key``, ``ENCRYPTION_KEY``, ``hmacKey``, ``APP_KEY``, ``AUTH_SALT``:
    :data:`_PURPOSE_KEY`), whose value must then look random (``cache_key``, ``sort_key`` are
    not secret names). Cursor names (``nextPageToken``, ``page_token``) are not secret names.
    The kind: ``password`` when the name says so (``pass``, ``pwd``), ``aws_secret`` when it
    names AWS, else ``generic_secret``.
Forms
    assigned    ``NAME = value``, ``NAME: value``, ``:=``, ``=>``, ``NAME["x"] = value``,
                through a conversion (``[]byte("...")``, ``b"..."``, ``Buffer.from(...)``),
                after Laravel's ``base64:``
    default     a lookup's default: ``getenv("NAME", "value")``, ``define('NAME', 'value')``,
                ``process.env.NAME ?? 'value'`` (``||``, ``or``)
    name/value  ``name: NAME`` then ``value: ...`` (Kubernetes env, ECS task definitions)
    flag        ``--password VALUE``, ``--api-key VALUE`` (tools' own password arguments:
                :mod:`traffic.scrub.positional`)
    spaced      ``NAME "value"`` (Gradle's ``storePassword "..."``, ``#define NAME "..."``,
                SQL's ``PASSWORD '...'``); a bare value after a setter (``aws configure set
                NAME VALUE``) or in a .netrc entry (``machine ... password VALUE``)
    element     ``<password>value</password>`` (Maven's settings.xml)
    cookie      a session's or token's cookie (``session_id``, ``sid``, ``auth``, ``csrftoken``)
    pgpass      the password of a ``host:port:database:user:password`` line
Values
    Never a template (``<x>``, ``{x}``, ``${``, ``{{``, ``#{``, ``%(``, ``$VAR``, ``$(``).
    Quoted: 8+ characters without a line break or backslash, not a raw string (``r"..."``);
    no whitespace or ``<>{}`` (prose, markup, a regex) but in a purpose key's random value of
    32+ (WordPress salts) or a Google app password. In a lookup's default, a flag and a
    name/value pair it must also be *password-shaped* (there a word is another name). Bare,
    under a password name: up to whitespace, a quote, ``,;|<>()[]{}`` or a ``&`` that starts a
    query parameter, and password-shaped: 6+ characters holding a digit, a symbol, both cases,
    or a passphrase (:func:`~traffic.scrub.rule.password_shaped`), not code, a path or a URL.
    Bare under other names: 16+ ``[A-Za-z0-9+/=_-]`` with a letter and a digit (only a
    token's shape tells a secret from an expression or a word).
"""

from __future__ import annotations

import re

from traffic.scrub.rule import (
    Rule,
    app_password,
    letters_and_digits,
    password_shaped,
    templated,
    token_like,
)

# The last word of a secret name; ``key`` covers api_key, access_key_id, private_key, whose
# whole name is then read (:func:`_classify`).
_KEYWORD = (
    r"(?:secret(?:[_-]?key(?:[_-]?base)?)?|token|passw(?:or)?d|passphrase|pass|pwd"
    r"|credentials?|key(?:[_-]?id)?|salt|erlang[_.-]?cookie)"
)
# Lowercase literals every keyword starts with (rule.Rule.anchors).
_KEYWORD_ANCHORS = ("secret", "token", "pass", "pwd", "credential", "key", "salt", "erlang")
_KEY_NAME = re.compile(r"(?i)(?:api|secret|access|private)[_-]?key$|access[_-]?key[_-]?id$")
_NAME_END = re.compile(r"(?i)" + _KEYWORD + r"$")
_NAME_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"
# Names that end in "token" but hold a cursor, not a credential.
_CURSOR_NAME = re.compile(r"(?i)(?:page|next|continuation|cursor|sync|resume)[_-]?token$")
# A key or salt named for what it does; the word starts the name, follows a separator or a
# digit, or is a camelCase word (hmacKey).
_WORD_START = r"(?:^|[_.\-\d]|(?<=[a-z])(?=[A-Z]))"
_PURPOSE_KEY = re.compile(
    _WORD_START + r"(?i:sign(?:ing|ature)?|encrypt(?:ion)?|enc|crypt|crypto|cipher|master|hmac"
    r"|auth|app|session|cookie|jwt|aes|fernet|licen[cs]e|client|shared|root|admin|account"
    r"|storage|service|server|write|ingest|webhook|integration|nonce|logged[_-]?in|validation"
    r"|decryption|preshared|psk)(?i:[_.-]?key|[_.-]?salt)$"
    r"|" + _WORD_START + r"(?i:salt)$"
)
_PASS_WORD = re.compile(_WORD_START + r"(?i:pass)$")

_ASSIGN = r"(?:\\?[\"'`])?\]?[ \t]*(?::=|=>|=|:(?!:))[ \t]*"
_CONVERSION = (
    r"(?:(?:\[\]byte|bytearray|bytes|Buffer\.from|SecretStr|Secret|String|str"
    r"|(?:bytes|bytearray)\.fromhex|(?:binascii\.)?unhexlify|(?:base64\.)?(?:urlsafe_)?b64decode"
    r"|Convert\.FromBase64String|hex::decode|Base64\.getDecoder\(\)\.decode)\([ \t]*)?"
    r"(?:(?P<prefix>[bru]{1,2})(?=[\"']))?"
)


# Values are read up to this many characters: a match is tried at every keyword, so an
# unbounded value would make a text of "key=key=key=..." cost its length squared.
_MAX_VALUE = 1024


def _quoted(tag: str) -> str:
    """A quoted value; ``tag`` keeps the group names of each use apart."""
    chars = {"dq": '[^"\\n\\\\]', "sq": "[^'\\n\\\\]", "bq": "[^`\\n\\\\]"}
    quotes = {"dq": '"', "sq": "'", "bq": "`"}
    return (
        "(?:"
        + "|".join(
            f"\\\\?{quotes[q]}(?P<{q}{tag}>{chars[q]}{{8,{_MAX_VALUE}}})\\\\?{quotes[q]}"
            for q in chars
        )
        + ")"
    )


def _value(tag: str) -> str:
    """A quoted value, or an unquoted one up to a delimiter (:func:`_value_span` cuts it at a
    ``&`` that starts a query parameter: one character class keeps the scan fast)."""
    bare = rf"(?:base64:)?(?P<bare{tag}>[^\s\"'`,;|<>()\[\]{{}}\\]{{1,{_MAX_VALUE}}})"
    return f"(?:{_quoted(tag)}|{bare})"


_QUERY_PARAMETER = re.compile(r"&[\w.-]{1,64}=")


_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{16,}")


def _classify(name: str) -> str | None:
    """``password``, ``secret`` or ``key`` (a purpose key: random values only) for a secret
    name, None for any other."""
    end = _NAME_END.search(name)
    if end is None or _CURSOR_NAME.search(name):
        return None
    keyword = end.group(0).lower()
    if keyword.startswith("key"):
        if _KEY_NAME.search(name):
            return "secret"
        return "key" if keyword == "key" and _PURPOSE_KEY.search(name) else None
    if keyword == "salt":
        return "key" if _PURPOSE_KEY.search(name) else None
    if keyword == "pass":
        return "password" if _PASS_WORD.search(name) else None
    if "pass" in keyword or keyword == "pwd":
        return "password"
    return "secret"


def _kind(name: str) -> str:
    lower = name.lower()
    if _classify(name) != "key" and ("pass" in lower or "pwd" in lower):
        return "password"
    return "aws_secret" if "aws" in lower else "generic_secret"


def _value_span(
    m: re.Match[str], kind_class: str, tag: str = "", strict: bool = False
) -> tuple[int, int] | None:
    """The span of the value (groups named with ``tag``) when it passes the checks of its
    name's class (module docstring); ``strict``: a quoted value must be shaped like an
    unquoted one (in a call's arguments or a name/value pair, a word is another name)."""
    group = next((f"{q}{tag}" for q in ("dq", "sq", "bq") if m.group(f"{q}{tag}")), None)
    if group is None:
        group = f"bare{tag}"
        value = m.group(group) if group in m.re.groupindex else None
        if value is None:
            return None
        parameter = _QUERY_PARAMETER.search(value)
        if parameter is not None:  # ?password=x&next=y: the value ends at "&next="
            value = value[: parameter.start()]
        start = m.start(group)
        end = start + len(value)
        if kind_class == "password":
            ok = m.string[end : end + 1] not in ("(", "[") and password_shaped(value)
        else:
            ok = _TOKEN.fullmatch(value) is not None and letters_and_digits(value)
        return (start, end) if ok and not templated(value) else None
    value = m.group(group)
    prefix = m.group("prefix") if "prefix" in m.re.groupindex else None
    if templated(value) or (prefix and "r" in prefix.lower()):  # r"...": a regex, a path
        return None
    if kind_class == "key":
        spaced = any(c.isspace() for c in value)
        ok = len(value) >= 16 and letters_and_digits(value) and (not spaced or len(value) >= 32)
    elif any(c.isspace() or c in "<>{}" for c in value):  # prose, markup, a regex
        ok = kind_class == "password" and app_password(value)
    else:
        ok = not strict or password_shaped(value)
    return m.span(group) if ok else None


def _name_of(m: re.Match[str]) -> str:
    """The whole name whose keyword the match starts with (up to 64 characters before it)."""
    window = m.string[max(0, m.start() - 64) : m.start()]
    return window[len(window.rstrip(_NAME_CHARS)) :] + m.group("kw")


def _name_kind(m: re.Match[str]) -> str:
    return _kind(_name_of(m))


# ---------------------------------------------------------------- after a secret name

# One pattern for the three forms that start at a name's keyword (one scan of the anchors):
# a lookup's default (``sep``), an assigned value, a flag's value (``flag``).
_AFTER_NAME = re.compile(
    r"(?i)(?P<kw>" + _KEYWORD + r")(?:"
    r"(?P<close>[\"'`]?\]?\)?)[ \t]*(?P<sep>,|\?\?|\|\||\bor\b)[ \t]*"
    + _quoted("_d")
    + r"|"
    + _ASSIGN
    + _CONVERSION
    + _value("")
    + r"|(?P<flag>[ \t]+)"
    + _value("_f")
    + r"|(?P<xml>[\w:.-]{0,40}>)(?P<xmlv>[^<\n]{4,1024})</"
    + r")"
)
_CALL_OPEN = re.compile(r"\w[ \t]*\([ \t]*[\"'`]$")
_LOOKUP_OPEN = re.compile(r"(?:\w\.|\[[ \t]*[\"'`]?|\([ \t]*[\"'`])$")


def _default_span(m: re.Match[str], name: str) -> tuple[int, int] | None:
    """getenv("NAME", "value"), define('NAME', 'value'): the name is a call's first argument;
    process.env.NAME ?? 'value', os.environ.get("NAME") or "value": a lookup."""
    if m.group("sep") != ",":
        name = name.rpartition(".")[2]  # process.env.NAME: the lookup opens before NAME
    start = m.start() - (len(name) - len(m.group("kw")))
    before = m.string[max(0, start - 40) : start]
    if m.group("sep") == ",":
        if m.group("close") not in ('"', "'", "`") or not _CALL_OPEN.search(before):
            return None
    elif not _LOOKUP_OPEN.search(before):
        return None
    kind_class = _classify(name)
    return None if kind_class is None else _value_span(m, kind_class, "_d", strict=True)


# Where a bare word after a secret name is its value: a setter command (``aws configure set
# NAME VALUE``, ``yarn config set NAME VALUE``), or a .netrc entry (``machine`` before it).
_SETTER = re.compile(r"(?:\bset|\bconfig(?:[ \t]+--?[\w-]+)*)[ \t]+$")
_NETRC = re.compile(r"(?:^|\n)[ \t]*(?:machine[ \t]+\S|default\b)")


def _flag_span(m: re.Match[str], name: str) -> tuple[int, int] | None:
    """A value after a space: ``--password VALUE`` (a long option); ``NAME "VALUE"`` (Gradle's
    ``storePassword "..."``, C's ``#define NAME "..."``, SQL's ``PASSWORD '...'``); a bare value
    after a setter command or in a .netrc entry."""
    start = m.start() - (len(name) - len(m.group("kw")))
    before = m.string[start - 1 : start]
    bare = m.group("bare_f")
    if bare is not None and bare[0] in "-$":
        return None
    if name.startswith("--"):
        kind_class = _classify(name.lstrip("-"))
        if before not in ("", " ", "\t", "\n") or kind_class is None:
            return None
        return _value_span(m, kind_class, "_f", strict=True)
    kind_class = _classify(name)
    if kind_class is None or (before.isalnum() or before in ("_", "-", ".", "/")):
        return None
    if bare is None:
        return _value_span(m, kind_class, "_f", strict=True)
    line = m.string[max(0, start - 200) : start]
    netrc = kind_class == "password" and name.lower() in ("password", "passwd")
    if _SETTER.search(line) or (netrc and _NETRC.search(m.string, max(0, start - 300), start)):
        return _value_span(m, kind_class, "_f")
    return None


def _xml_span(m: re.Match[str], name: str) -> tuple[int, int] | None:
    """<password>VALUE</password>: an element named by a secret name (Maven's settings.xml)."""
    start = m.start() - (len(name) - len(m.group("kw")))
    if m.group("xml") != ">" or m.string[start - 1 : start] != "<":
        return None
    kind_class = _classify(name)
    value = m.group("xmlv").strip()
    if kind_class is None or templated(value):
        return None
    if kind_class == "password":
        ok = password_shaped(value)
    else:
        ok = _TOKEN.fullmatch(value) is not None and letters_and_digits(value)
    at = m.start("xmlv") + m.group("xmlv").index(value)
    return (at, at + len(value)) if ok else None


def _after_name_span(m: re.Match[str]) -> tuple[int, int] | None:
    name = _name_of(m)
    if m.group("sep") is not None:
        return _default_span(m, name)
    if m.group("flag") is not None:
        return _flag_span(m, name)
    if m.group("xml") is not None:
        return _xml_span(m, name)
    kind_class = _classify(name)
    return None if kind_class is None else _value_span(m, kind_class)


# ---------------------------------------------------------------- name/value pairs

_NAME_VALUE = re.compile(r"(?i)value[\"'`]?[ \t]*[:=][ \t]*" + _value(""))
_PAIR_NAME = re.compile(
    r"(?i)\b(?:name|key)[\"'`]?[ \t]*[:=][ \t]*[\"'`]?(?P<name>[\w.-]+)[\"'`]?[ \t]*[,;]?"
    r"\s*[\"'`]?$"
)


def _pair_name(m: re.Match[str]) -> str:
    found = _PAIR_NAME.search(m.string, max(0, m.start() - 160), m.start())
    return found.group("name") if found else ""


def _name_value_span(m: re.Match[str]) -> tuple[int, int] | None:
    kind_class = _classify(_pair_name(m))
    return None if kind_class is None else _value_span(m, kind_class, strict=True)


# ---------------------------------------------------------------- cookies, .pgpass

# Each skipped cookie ends at its ";" (one way to match: no backtracking across cookies).
_COOKIE = re.compile(
    r"(?i)cookie(?:[\"'`]?[ \t]*[:=]|[ \t]+)[ \t]*[\"'`]?(?:[^;\n\r\"'`]{0,1024};){0,64}?[ \t]*"
    r"[\w.-]{0,40}?(?:sess|sid|auth|token|jwt|remember)[\w.-]{0,40}="
    r"(?P<value>[^;\s\"'`,]{16,1024})"
)


def _cookie_span(m: re.Match[str]) -> tuple[int, int] | None:
    value = m.group("value")
    if templated(value) or not token_like(value):
        return None
    return m.span("value")


_PGPASS = re.compile(
    r"(?m)^[A-Za-z0-9.*_-]+:(?:\d{1,5}|\*):[^:\s]+:[^:\s]+:(?P<password>(?:[^\s:\\]|\\.){1,1024})\r?$"
)
_PGPASS_GATE = re.compile(r":(?:\d{1,5}|\*):[^:\s]+:[^:\s]+:[^:\s]")


def _pgpass_span(m: re.Match[str]) -> tuple[int, int] | None:
    return m.span("password") if password_shaped(m.group("password")) else None


NAMED_RULES: tuple[Rule, ...] = (
    Rule(_AFTER_NAME, _after_name_span, _name_kind, anchors=_KEYWORD_ANCHORS),
    Rule(_NAME_VALUE, _name_value_span, lambda m: _kind(_pair_name(m)), anchors=("value",)),
    Rule(_COOKIE, _cookie_span, "session_cookie", anchors=("cookie",)),
    Rule(_PGPASS, _pgpass_span, "password", gate=lambda t: _PGPASS_GATE.search(t) is not None),
)
