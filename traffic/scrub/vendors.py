"""Secrets known by their shape: vendors' published token formats, webhook URLs, signed URLs and
encoded private keys. Each rule reports the token (or the URL) alone.

Vendor tokens
    A prefix the vendor documents, then a body the rule checks (:data:`VENDOR_TOKENS`); the
    body needs a digit or both cases (:func:`~traffic.scrub.rule.token_like`), so
    ``ghp_xxxx...`` and ``AKIAXXXX...`` placeholders stay. Public identifiers that share a
    vendor's prefix family are *not* secrets and are not listed: Mapbox ``pk.`` tokens,
    Stripe ``pk_`` keys, Square ``sq0idp-`` application ids, Twilio ``AC`` account SIDs.
    Mailgun's private keys since 2019 have no prefix: 32 hex, ``-``, 8 hex, ``-``, 8 hex.
Pairs
    A Twilio account SID followed by a 32-hex auth token (``Client("AC...", "...")``,
    ``AC...:token``): the token.
Webhooks
    URLs that are credentials by themselves: Discord, Microsoft Teams (``webhook.office.com``,
    ``outlook.office.com/webhook``), Zapier catch hooks (Slack's: detect-secrets' plugin).
Signed URLs
    The ``sig=`` of an Azure shared-access signature (``...&sig=...``).
Encoded keys
    A PEM private key in base64 (a kubeconfig's ``client-key-data``, a Kubernetes Secret's
    data): ``LS0tLS1CRUdJTi...`` decoded to a ``BEGIN ... PRIVATE KEY`` line.
Passwords in connection strings without a user
    ``redis://:PW@host``, and Go's MySQL DSN ``user:PW@tcp(host)``.

Formats follow the vendors' documentation and the public rule sets of gitleaks and
detect-secrets; no maintained Python package carries them (detect-secrets has 23 plugins, its
twilio plugin flags account SIDs: docs/secrets.md).
"""

from __future__ import annotations

import base64
import binascii
import re

from traffic.scrub.rule import Family, Rule, group, templated, token_like, whole

_B = r"(?<![A-Za-z0-9_-])"  # token start boundary
_E = r"(?![A-Za-z0-9_-])"  # token end boundary
# (name, kind, prefix, rest): the check applies to ``rest``.
VENDOR_TOKENS = (
    ("anthropic", "anthropic_key", r"sk-ant-", r"[A-Za-z0-9_-]{20,}"),
    ("openai", "openai_key", r"sk-(?!ant-)(?:proj-|svcacct-|admin-)?", r"[A-Za-z0-9_-]{20,}"),
    ("stripe", "stripe_key", r"(?:sk|rk)_(?:live|test)_", r"[A-Za-z0-9]{16,}"),
    ("stripe_webhook", "stripe_key", r"whsec_", r"[A-Za-z0-9+/]{32,}"),
    ("aws", "aws_access_key", r"(?:AKIA|ASIA)", r"[0-9A-Z]{16}"),
    ("github", "github_token", r"gh[pousr]_", r"[A-Za-z0-9]{36,}"),
    ("github_pat", "github_token", r"github_pat_", r"[A-Za-z0-9_]{22,}"),
    ("gitlab", "gitlab_token", r"glpat-", r"[A-Za-z0-9_-]{20,}"),
    ("slack", "slack_token", r"(?:xox[abposre]|xapp)-", r"[A-Za-z0-9-]{10,}"),
    ("google", "google_api_key", r"AIza", r"[0-9A-Za-z_-]{35}"),
    ("huggingface", "huggingface_token", r"hf_", r"[A-Za-z0-9]{30,}"),
    ("jwt", "jwt", r"eyJ", r"[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{10,}"),
    ("mapbox", "mapbox_token", r"sk\.eyJ", r"[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{16,}"),
    ("digitalocean", "digitalocean_token", r"do[opr]_v1_", r"[a-f0-9]{64}"),
    ("shopify", "shopify_token", r"shp(?:at|ca|pa|ss)_", r"[a-fA-F0-9]{32}"),
    ("groq", "groq_key", r"gsk_", r"[A-Za-z0-9]{48,}"),
    ("replicate", "replicate_token", r"r8_", r"[A-Za-z0-9]{37,}"),
    ("postman", "postman_key", r"PMAK-", r"[a-f0-9]{24}-[a-f0-9]{34}"),
    ("linear", "linear_key", r"lin_api_", r"[A-Za-z0-9]{40,}"),
    ("databricks", "databricks_token", r"dapi", r"[a-f0-9]{32}(?:-\d)?"),
    ("newrelic", "newrelic_key", r"NR(?:AK|II|JS)-", r"[A-Za-z0-9]{27}"),
    ("vault", "vault_token", r"hv[sbr]\.", r"[A-Za-z0-9_-]{24,}"),
    (
        "doppler",
        "doppler_token",
        r"dp\.(?:st|ct|sa|scim|audit|pt)\.",
        r"(?:[a-z0-9_-]{2,35}\.)?[A-Za-z0-9]{40,44}",
    ),
    ("notion", "notion_token", r"ntn_", r"[0-9]{11}[A-Za-z0-9]{32,35}"),
    ("notion_legacy", "notion_token", r"secret_", r"[A-Za-z0-9]{43}"),
    ("mailgun", "mailgun_key", r"key-", r"[0-9a-f]{32}"),
    ("age", "age_secret_key", r"AGE-SECRET-KEY-1", r"[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),
    (
        "braintree",
        "braintree_token",
        r"access_token\$(?:production|sandbox)\$",
        r"[a-z0-9]{16}\$[a-f0-9]{32}",
    ),
    ("twitter", "twitter_token", r"A{20}", r"[A-Za-z0-9%]{30,}"),
    ("grafana", "grafana_token", r"gl(?:sa|c)_", r"[A-Za-z0-9+/=_]{32,}"),
    ("heroku", "heroku_key", r"HRKU-", r"[A-Za-z0-9_-]{40,}"),
    ("twilio", "twilio_key", r"SK", r"[0-9a-f]{32}"),
    ("npm", "npm_token", r"npm_", r"[A-Za-z0-9]{36}"),
    ("atlassian", "atlassian_token", r"ATATT3", r"[A-Za-z0-9_=-]{150,}"),
    ("supabase", "supabase_token", r"sbp_", r"[a-f0-9]{40}"),
    ("planetscale", "planetscale_token", r"pscale_(?:tkn|pw|oauth)_", r"[A-Za-z0-9_.-]{32,64}"),
    ("pulumi", "pulumi_token", r"pul-", r"[a-f0-9]{40}"),
    ("sentry", "sentry_token", r"sntr[ysu]_", r"[A-Za-z0-9+/=_-]{30,}"),
    ("square", "square_token", r"sq0(?:atp|csp)-", r"[0-9A-Za-z_-]{22,43}"),
    ("flyio", "flyio_token", r"(?:fo1_|fm[12][ar]?_)", r"[A-Za-z0-9+/_-]{40,}={0,3}"),
    ("django", "generic_secret", r"django-insecure-", r"[a-z0-9!@#$%^&*(\-_=+)]{40,}"),
)
# Where each vendor's token starts (lowercase literals, rule.Rule.anchors).
_ANCHORS: dict[str, tuple[str, ...]] = {
    "anthropic": ("sk-ant-",),
    "openai": ("sk-",),
    "stripe": ("sk_", "rk_"),
    "stripe_webhook": ("whsec_",),
    "aws": ("akia", "asia"),
    "github": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    "github_pat": ("github_pat_",),
    "gitlab": ("glpat-",),
    "slack": ("xox", "xapp-"),
    "google": ("aiza",),
    "huggingface": ("hf_",),
    "jwt": ("eyj",),
    "mapbox": ("sk.eyj",),
    "digitalocean": ("doo_v1_", "dop_v1_", "dor_v1_"),
    "shopify": ("shpat_", "shpca_", "shppa_", "shpss_"),
    "groq": ("gsk_",),
    "replicate": ("r8_",),
    "postman": ("pmak-",),
    "linear": ("lin_api_",),
    "databricks": ("dapi",),
    "newrelic": ("nrak-", "nrii-", "nrjs-"),
    "vault": ("hvs.", "hvb.", "hvr."),
    "doppler": ("dp.",),
    "notion": ("ntn_",),
    "notion_legacy": ("secret_",),
    "mailgun": ("key-",),
    "age": ("age-secret-key-1",),
    "braintree": ("access_token$",),
    "twitter": ("a" * 20,),
    "grafana": ("glsa_", "glc_"),
    "heroku": ("hrku-",),
    "twilio": ("sk",),
    "npm": ("npm_",),
    "atlassian": ("atatt3",),
    "supabase": ("sbp_",),
    "planetscale": ("pscale_",),
    "pulumi": ("pul-",),
    "sentry": ("sntr",),
    "square": ("sq0",),
    "flyio": ("fo1_", "fm1", "fm2"),
    "django": ("django-insecure-",),
}
_VENDOR_KIND = {name: kind for name, kind, _, _ in VENDOR_TOKENS}


def _vendor_rule(name: str, prefix: str, rest: str) -> Rule:
    """One vendor's rule, anchored at its own prefixes (run with the others as one
    :class:`~traffic.scrub.rule.Family`)."""
    pattern = re.compile(f"{_B}(?P<{name}>{prefix}(?P<{name}_rest>{rest})){_E}")
    return Rule(pattern, _vendor_span, _VENDOR_KIND[name], anchors=_ANCHORS[name])


def _vendor_span(m: re.Match[str]) -> tuple[int, int] | None:
    assert m.lastgroup is not None  # the outer group closes last
    return m.span() if token_like(m.group(m.lastgroup + "_rest")) else None


# A Firebase Cloud Messaging server key: ``AAAA`` + 7, ``:APA91b``, then 100+. Matched at the
# colon (the anchor), the 11 characters before it read by a fixed-width look-behind.
_FCM = re.compile(r"(?<=AAAA[A-Za-z0-9_-]{7}):APA91b[A-Za-z0-9_-]{100,}" + _E)


def _fcm_span(m: re.Match[str]) -> tuple[int, int]:
    return (m.start() - 11, m.end())


_TWILIO_PAIR = re.compile(
    r"AC[0-9a-f]{32}[\"'`]?[ \t]*[,:][ \t]*[\"'`]?(?P<token>[0-9a-f]{32})(?![0-9A-Za-z])"
)

_WEBHOOK = re.compile(
    r"https://(?:(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d{5,}/[A-Za-z0-9_-]{20,}"
    r"|[\w-]+\.webhook\.office\.com/webhookb2/[^\s\"'`<>]{20,}"
    r"|outlook\.office(?:365)?\.com/webhook/[^\s\"'`<>]{20,}"
    r"|hooks\.zapier\.com/hooks/catch/\d+/[A-Za-z0-9]+/?)"
)

_SAS_SIG = re.compile(r"(?<=[?&])sig=(?P<sig>[A-Za-z0-9%+/=]{20,})")

# "-----BEGIN" in base64 at a 3-byte boundary, then the rest of the encoded block.
_PEM_BASE64 = re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{20,}={0,2}")


def _pem_base64(m: re.Match[str]) -> tuple[int, int] | None:
    head = m.group(0)[:64]
    try:
        decoded = base64.b64decode(head[: len(head) // 4 * 4]).decode("ascii", "replace")
    except (binascii.Error, ValueError):
        return None
    return m.span() if "PRIVATE KEY" in decoded.split("\n", 1)[0] else None


# redis://:PW@host (no user); Go's MySQL DSN user:PW@tcp(host) / @unix(path).
_URL_NO_USER = re.compile(r"://:(?P<password>[^\s@/:\"'`]{4,256})@")
_GO_DSN = re.compile(r"(?<=[\"'`=\s])[\w.-]{1,64}:(?P<password>[^\s@/\"'`]{3,256})@(?:tcp|unix)\(")


def _password_group(m: re.Match[str]) -> tuple[int, int] | None:
    # masks (``***``) are dropped with every other stand-in by the scrubber
    return None if templated(m.group("password")) else m.span("password")


# Mailgun's private API key since 2019: 32 hex, then two groups of 8. Matched from its first
# "-" (a literal start: re skips to it), the groups after it read first (most "-" fail
# there), then the 32 hex before it by a look-behind.
_MAILGUN = re.compile(
    r"-[0-9a-f]{8}-[0-9a-f]{8}(?![0-9a-f-])(?<=[0-9a-f]{32}-[0-9a-f]{8}-[0-9a-f]{8})"
)


def _mailgun_span(m: re.Match[str]) -> tuple[int, int] | None:
    start = m.start() - 32
    before = m.string[start - 1 : start]
    return None if before and before in "0123456789abcdef-" else (start, m.end())


VENDOR_RULES: tuple[Rule | Family, ...] = (
    Family(tuple(_vendor_rule(name, prefix, rest) for name, _, prefix, rest in VENDOR_TOKENS)),
    Rule(_FCM, _fcm_span, "fcm_server_key", anchors=(":apa91b",)),
    Rule(_TWILIO_PAIR, group("token"), "twilio_key", anchors=("ac",)),
    Rule(_MAILGUN, _mailgun_span, "mailgun_key", gate=lambda text: "-" in text),
    Rule(_WEBHOOK, whole(), "webhook_url", anchors=("https://",)),
    Rule(_SAS_SIG, group("sig"), "azure_sas_token", anchors=("sig=",)),
    Rule(_PEM_BASE64, _pem_base64, "private_key_pem", anchors=("ls0tls1crudjti",)),
    Rule(_URL_NO_USER, _password_group, "password_in_url", anchors=("://:",)),
    Rule(
        _GO_DSN,
        _password_group,
        "password_in_url",
        gate=lambda text: "@tcp(" in text or "@unix(" in text,
    ),
)
