"""Secrets known by their place: a tool's password argument on a command line, a password in
SQL, and the credential argument of a call that takes one by position. The span is the value.

Command lines
    A tool's own password flag or argument: ``curl -u user:PW``, ``mysql -pPW`` / ``-p'PW'``,
    ``docker login -p PW`` (podman, nerdctl, helm registry, oras, skopeo, buildah, az),
    ``redis-cli -a PW``, ``sshpass -p PW``, ``mongo -p PW``, ``poetry config http-basic.REPO
    USER PW``, ``net user NAME PW``, ``ConvertTo-SecureString "PW" -AsPlainText``,
    ``htpasswd -b FILE USER PW``, ``openssl ... -passin pass:PW``, ``keytool -storepass PW``,
    ``sqlcmd -P PW``, ``smbclient -U USER%PW``, ``ldapsearch -w PW``, ``zip -P PW``,
    ``7z -pPW``, ``echo PW | ... --password-stdin``. Quoted or bare; never a ``$VAR`` or a
    template.
SQL
    ``IDENTIFIED BY 'PW'`` and ``IDENTIFIED WITH plugin BY 'PW'`` (MySQL, Oracle).
    (``PASSWORD 'PW'`` is a value after a secret name: :mod:`traffic.scrub.named`.)
Calls
    A quoted literal at a credential's position in a call that takes it there
    (:data:`CREDENTIAL_CALLS`: ``DriverManager.getConnection(url, user, PW)``,
    ``smtp.login(user, PW)``, ``HTTPBasicAuth(user, PW)``, ``requests.get(..., auth=(user,
    PW))``, ``new NetworkCredential(user, PW)``, ``jwt.sign(payload, SECRET)``,
    ``createHmac(alg, SECRET)``...). The arguments are split at top-level commas, quotes and
    brackets respected; a password must be password-shaped
    (:func:`~traffic.scrub.rule.password_shaped`) or a Google app password, a signing secret
    8+ characters without whitespace.
"""

from __future__ import annotations

import re

from traffic.scrub.rule import Rule, app_password, password_shaped, templated

_LOGIN_TOOLS = ("docker", "podman", "nerdctl", "helm registry", "oras", "skopeo", "buildah", "az")
_BEFORE = r"[^\n|;&]{0,300}?"
_CLI_PASSWORD = re.compile(
    r"(?:curl\b" + _BEFORE + r"\s(?:-u|--user)\s*[\"']?[^\s:\"']+:"
    r"|mysql(?:dump|admin)?\b" + _BEFORE + r"\s-p"
    r"|(?:"
    + "|".join(f"(?<={tool} )" for tool in _LOGIN_TOOLS)
    + r")login\b"
    + _BEFORE
    + r"\s(?:-p|--password)[ \t]+"
    r"|redis-cli\b" + _BEFORE + r"\s-a[ \t]+"
    r"|sshpass[ \t]+-p[ \t]*"
    r"|mongo(?:sh)?\b" + _BEFORE + r"\s-p[ \t]+"
    r"|poetry[ \t]+config[ \t]+http-basic\.\S{1,200}[ \t]+\S{1,200}[ \t]+"
    r"|net[ \t]+user[ \t]+\S{1,100}[ \t]+(?=\S+[ \t]+/(?i:add|domain|active)\b|\S+[ \t]*(?:\n|$))"
    r"|(?i:convertto-securestring)[ \t]+(?:-String[ \t]+)?(?=[\"'])"
    r"|htpasswd\b[^\n|;&]{0,100}?\s-[a-zA-Z]*b[a-zA-Z]*[ \t]+\S{1,200}[ \t]+\S{1,100}[ \t]+"
    r"|openssl\b" + _BEFORE + r"\s-pass(?:in|out)[ \t]+pass:"
    r"|keytool\b" + _BEFORE + r"\s-(?:store|key|src|dest)(?:store)?pass[ \t]+"
    r"|sqlcmd\b" + _BEFORE + r"\s-P[ \t]*"
    r"|smbclient\b" + _BEFORE + r"\s-U[ \t]*[^\s%]{1,100}%"
    r"|ldap(?:search|add|modify|delete|passwd|whoami|compare)\b" + _BEFORE + r"\s-w[ \t]+"
    r"|zip\b" + _BEFORE + r"\s-P[ \t]+"
    r"|7z\b" + _BEFORE + r"\s-p"
    r"|echo[ \t]+(?=[^\n|]{1,300}\|[^\n|]{0,200}--password-stdin)"
    r")(?:'(?P<sq>[^'\n]{4,1024})'|\"(?P<dq>[^\"\n]{4,1024})\""
    r"|(?P<bare>[^\s\"'`|;&]{4,1024}))"
)
_CLI_ANCHORS = (
    *("curl", "mysql", "login", "redis-cli", "sshpass", "mongo", "poetry", "net user"),
    *("convertto-securestring", "htpasswd", "openssl", "keytool", "sqlcmd", "smbclient"),
    *("ldap", "zip", "7z", "echo"),
)


def _quoted_or_bare(m: re.Match[str]) -> str:
    return next(g for g in ("sq", "dq", "bare") if m.group(g) is not None)


def _cli_span(m: re.Match[str]) -> tuple[int, int] | None:
    name = _quoted_or_bare(m)
    value = m.group(name)
    if value[0] in "-$/" or templated(value):
        return None
    if m.group(0).startswith("echo") and not password_shaped(value):
        return None  # echo "$TOKEN" | ... is templated; echo hello | ... is not a password
    return m.span(name)


_IDENTIFIED_BY = re.compile(
    r"(?i)identified[ \t]+(?:with[ \t]+\w+[ \t]+)?(?:by|as)[ \t]+"
    r"(?:'(?P<sq>[^'\n]{1,1024})'|\"(?P<dq>[^\"\n]{1,1024})\"|(?P<bare>[^\s;'\"]{6,1024}))"
)


def _sql_span(m: re.Match[str]) -> tuple[int, int] | None:
    name = _quoted_or_bare(m)
    value = m.group(name)
    if templated(value) or (name == "bare" and not password_shaped(value)):
        return None
    return m.span(name)


# A call (its name's last part, before "(") -> (index of the credential argument, kind).
CREDENTIAL_CALLS: dict[str, tuple[int, str]] = {
    "getconnection": (2, "password"),  # JDBC DriverManager
    "login": (1, "password"),  # smtplib, ftplib, imaplib, poplib, ldap3...
    "httpbasicauth": (1, "password"),
    "httpdigestauth": (1, "password"),
    "basicauth": (1, "password"),
    "setbasicauth": (1, "password"),
    "withbasicauth": (1, "password"),
    "networkcredential": (1, "password"),
    "passwordauthentication": (1, "password"),
    "usernamepasswordcredentials": (1, "password"),
    "usernamepasswordauthenticationtoken": (1, "password"),
    "mysqli_connect": (2, "password"),
    "mysqli": (2, "password"),
    "pdo": (2, "password"),
    "auth=": (1, "password"),  # requests' auth=(user, password)
    "sign": (1, "generic_secret"),  # jwt.sign(payload, secret)
    "encode": (1, "generic_secret"),  # jwt.encode(payload, secret, algorithm)
    "createhmac": (1, "generic_secret"),
}
_CALL = re.compile(
    r"(?i)(?:(?<=[\s.>:(=!,\[{])|^)(?P<call>getConnection|login|HTTP(?:Basic|Digest)Auth"
    r"|(?:set|with)?BasicAuth|NetworkCredential|PasswordAuthentication"
    r"|UsernamePassword(?:Credentials|AuthenticationToken)|mysqli_connect|mysqli|PDO"
    r"|createHmac)[ \t]*\(|jwt\.(?P<jwt>sign|encode)[ \t]*\(|(?P<auth>auth[ \t]*=[ \t]*\()"
)
_CALL_ANCHORS = (
    *("getconnection", "login", "httpbasicauth", "httpdigestauth", "basicauth", "setbasicauth"),
    *("withbasicauth", "networkcredential", "passwordauthentication", "usernamepassword"),
    *("mysqli", "pdo", "jwt.", "createhmac", "auth"),
)
_STRING = re.compile(r"\s*(?:'(?P<sq>[^'\n\\]*)'|\"(?P<dq>[^\"\n\\]*)\"|`(?P<bq>[^`\n\\]*)`)\s*")
_OPEN, _CLOSE = "([{", ")]}"
_MAX_ARGS_TEXT = 600


def _argument(text: str, start: int, index: int) -> tuple[int, int] | None:
    """The span of argument ``index`` of the call whose arguments start at ``start``: commas
    split at depth 0; quotes skipped; None past the call's end or ``_MAX_ARGS_TEXT``."""
    depth, at, arg, arg_start = 0, start, 0, start
    stop = min(len(text), start + _MAX_ARGS_TEXT)
    while at < stop:
        c = text[at]
        if c in "'\"`":
            end = text.find(c, at + 1, stop)
            if end == -1:
                return None
            at = end + 1
            continue
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            if depth == 0:
                return (arg_start, at) if arg == index else None
            depth -= 1
        elif c == "," and depth == 0:
            if arg == index:
                return (arg_start, at)
            arg, arg_start = arg + 1, at + 1
        at += 1
    return None


def _call_span(m: re.Match[str]) -> tuple[int, int] | None:
    call = "auth=" if m.group("auth") else (m.group("jwt") or m.group("call")).lower()
    index, kind = CREDENTIAL_CALLS[call]
    span = _argument(m.string, m.end(), index)
    if span is None:
        return None
    literal = _STRING.fullmatch(m.string, span[0], span[1])
    if literal is None:
        return None
    name = next(g for g in ("sq", "dq", "bq") if literal.group(g) is not None)
    value = literal.group(name)
    if templated(value):
        return None
    if kind == "password":
        ok = password_shaped(value) or app_password(value)
    else:
        ok = len(value) >= 8 and not any(c.isspace() for c in value)
    return literal.span(name) if ok else None


def _call_kind(m: re.Match[str]) -> str:
    call = "auth=" if m.group("auth") else (m.group("jwt") or m.group("call")).lower()
    return CREDENTIAL_CALLS[call][1]


POSITIONAL_RULES: tuple[Rule, ...] = (
    Rule(_CLI_PASSWORD, _cli_span, "password", anchors=_CLI_ANCHORS),
    Rule(_IDENTIFIED_BY, _sql_span, "password", anchors=("identified",)),
    Rule(_CALL, _call_span, _call_kind, anchors=_CALL_ANCHORS),
)
