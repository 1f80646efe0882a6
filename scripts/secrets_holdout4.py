"""Fourth held-out secrets corpus ("holdout4").

Written blind: its author never saw the scrubber's rules, its tests, its docs or the three
earlier held-out sets. Every value is fake, drawn from a seeded random.Random, but shaped
like the real thing (vendor prefixes, lengths, alphabets) wherever a public format exists.

The snippets imitate what developers paste into AI coding assistants: source code in many
languages, config files, CI definitions, CLI sessions, HTTP dumps, logs and chat prose.

Templates live in secrets_holdout4_*.py. Each takes a Fake and returns a list of parts:
plain strings (kept as-is) or spans made with S(kind, value), a secret that must be
redacted, and N(kind, value), a lookalike that must survive untouched. Only the value
itself is labelled, never the quotes or key name around it. Documented placeholders are
lookalikes; debatable values (client ids, CSRF tokens, IVs, key ids) are left unlabelled.

holdout4_items() draws every template `rounds` times, each draw from its own generator
seeded with f"{SEED}:{source}:{template name}:{round}", joins the parts and records the
character offsets of every labelled value.

Run:  .venv/bin/python scripts/secrets_eval.py --corpus --holdout4
"""

from __future__ import annotations

import base64
import json
import random
import re
import string
import textwrap
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

SEED = 20261208

ALNUM = string.ascii_letters + string.digits
LOWER = string.ascii_lowercase + string.digits
UPPER = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
URLSAFE = ALNUM + "-_"
BASE32 = string.ascii_uppercase + "234567"
PW_SYMBOLS = "!*-._~+"

T = TypeVar("T")


@dataclass(frozen=True)
class Span:
    """A labelled value: role is "secret" or "lookalike"."""

    role: str
    kind: str
    value: str


Part = str | Span
Template = Callable[["Fake"], list[Part]]


def S(kind: str, value: str) -> Span:
    """A secret: must be redacted."""
    return Span("secret", kind, value)


def N(kind: str, value: str) -> Span:
    """A lookalike: must survive untouched."""
    return Span("lookalike", kind, value)


_SLOT = re.compile(r"\{%([a-z0-9_]+)%\}")
_JOIN = re.compile(r"\{%\+%\}\n[ \t]*")


def fill(text: str, **slots: Part) -> list[Part]:
    """Dedent `text` and replace each {%name%} slot with slots[name] (a slot may repeat).

    A line ending in {%+%} is joined to the next one, minus its indentation (long log lines).
    """
    body = _JOIN.sub("", textwrap.dedent(text).removeprefix("\n"))
    parts: list[Part] = []
    used: set[str] = set()
    pos = 0
    for m in _SLOT.finditer(body):
        parts.append(body[pos : m.start()])
        parts.append(slots[m.group(1)])
        used.add(m.group(1))
        pos = m.end()
    parts.append(body[pos:])
    if set(slots) - used:
        raise ValueError(f"unused slots: {sorted(set(slots) - used)}")
    return parts


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


WORDS = _words(
    "orders billing ledger atlas falcon harbor nimbus quartz raven summit tundra willow "
    "cobalt ember granite juniper lantern meadow orbit pixel river saffron timber velvet "
    "anchor beacon cedar delta fjord glacier hollow island kestrel lotus marble"
)
FIRST = _words("jane omar lena tariq mei sofia ravi noah ines kenji aisha lucas priya tom")
REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2")
PLACEHOLDERS = (
    "<your-api-key>",
    "YOUR_API_KEY_HERE",
    "xxxxxxxxxxxxxxxxxxxxxxxx",
    "<REPLACE_ME>",
    "your-secret-here",
    "<token>",
    "INSERT_KEY_HERE",
    "********",
    "[REDACTED]",
    "<redacted>",
)


def _der_pem(label: str, der: bytes, width: int = 64) -> str:
    body = base64.b64encode(der).decode()
    lines = [body[i : i + width] for i in range(0, len(body), width)]
    return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class Fake:
    """Seeded generator of fake secrets and harmless lookalikes."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    # -- primitives -------------------------------------------------------------------
    def chars(self, alphabet: str, n: int) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def alnum(self, n: int) -> str:
        return self.chars(ALNUM, n)

    def hex(self, n: int) -> str:
        return self.chars(HEX, n)

    def upper(self, n: int) -> str:
        return self.chars(UPPER, n)

    def lower(self, n: int) -> str:
        return self.chars(LOWER, n)

    def urlsafe(self, n: int) -> str:
        return self.chars(URLSAFE, n)

    def digits(self, n: int) -> str:
        return str(self.r.randint(1, 9)) + self.chars(string.digits, n - 1)

    def num(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    def pick(self, seq: Sequence[T]) -> T:
        return self.r.choice(seq)

    def raw(self, n: int) -> bytes:
        return self.r.randbytes(n)

    def b64(self, n: int) -> str:
        return base64.b64encode(self.raw(n)).decode()

    def b64url(self, n: int) -> str:
        return _b64url(self.raw(n))

    # -- harmless filler --------------------------------------------------------------
    def word(self) -> str:
        return self.pick(WORDS)

    def first(self) -> str:
        return self.pick(FIRST)

    def user(self) -> str:
        return self.pick((f"svc_{self.word()}", self.first(), f"{self.word()}_app", "deploy"))

    def email(self) -> str:
        return f"{self.first()}.{self.word()}@example.com"

    def region(self) -> str:
        return self.pick(REGIONS)

    def host(self) -> str:
        return f"{self.word()}-{self.pick(('db', 'api', 'cache', 'mq'))}.internal.example.net"

    def ip(self) -> str:
        return f"10.{self.num(0, 255)}.{self.num(0, 255)}.{self.num(1, 254)}"

    # -- lookalike values -------------------------------------------------------------
    def uuid(self) -> str:
        return str(uuid.UUID(int=self.r.getrandbits(128), version=4))

    def git_sha(self) -> str:
        return self.hex(40)

    def short_sha(self) -> str:
        return self.hex(self.pick((7, 8, 10, 12)))

    def sha256(self) -> str:
        return self.hex(64)

    def md5(self) -> str:
        return self.hex(32)

    def semver(self) -> str:
        return f"{self.num(0, 9)}.{self.num(0, 30)}.{self.num(0, 40)}"

    def timestamp(self) -> str:
        return (
            f"2026-{self.num(1, 12):02d}-{self.num(1, 28):02d}T{self.num(0, 23):02d}:"
            f"{self.num(0, 59):02d}:{self.num(0, 59):02d}.{self.num(0, 999):03d}Z"
        )

    def epoch(self) -> int:
        return 1_767_000_000 + self.num(0, 30_000_000)

    def trace_id(self) -> str:
        return self.hex(32)

    def span_id(self) -> str:
        return self.hex(16)

    def docker_digest(self) -> str:
        return "sha256:" + self.sha256()

    def sri(self) -> str:
        return self.pick(("sha512-" + self.b64(64), "sha384-" + self.b64(48)))

    def css_color(self) -> str:
        return "#" + self.hex(6)

    def pod_name(self, base: str) -> str:
        return f"{base}-{self.chars('bcdfghjklmnpqrstvwxz2456789', 10)}-{self.lower(5)}"

    def placeholder(self) -> str:
        return self.pick(PLACEHOLDERS)

    def harmless_b64(self) -> str:
        doc = {"page": self.num(2, 90), "sort": self.pick(("created", "name")), "dir": "asc"}
        return base64.b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode()

    def ssh_rsa_pub(self) -> str:
        blob = b"\x00\x00\x00\x07ssh-rsa\x00\x00\x00\x03\x01\x00\x01\x00\x00\x01\x01\x00"
        return f"ssh-rsa {base64.b64encode(blob + self.raw(256)).decode()} {self.first()}@laptop"

    def ed25519_pub(self) -> str:
        blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + self.raw(32)
        return f"ssh-ed25519 {base64.b64encode(blob).decode()} {self.first()}@{self.word()}"

    def ssh_fingerprint(self) -> str:
        return "SHA256:" + self.b64(32).rstrip("=")

    def public_pem(self) -> str:
        head = bytes.fromhex("30820122300d06092a864886f70d01010105000382010f003082010a0282010100")
        return _der_pem("PUBLIC KEY", head + self.raw(256) + bytes.fromhex("0203010001"))

    def cert_pem(self) -> str:
        head = bytes.fromhex("3082035d30820245a003020102021400")
        return _der_pem("CERTIFICATE", head + self.raw(845))

    # -- generic secrets --------------------------------------------------------------
    def password(self) -> str:
        style = self.num(0, 3)
        if style == 0:
            return self.word().capitalize() + self.digits(self.num(2, 4)) + self.pick(PW_SYMBOLS)
        if style == 1:
            return self.alnum(1) + self.chars(ALNUM + PW_SYMBOLS, self.num(13, 21))
        if style == 2:
            return f"{self.word()}{self.pick('!*-.')}{self.word().capitalize()}{self.num(10, 99)}"
        leet = self.word().capitalize().translate(str.maketrans("aeio", "4310"))
        return f"{leet}{self.pick('!*~')}{self.word()}{self.num(1, 9)}"

    def passphrase(self) -> str:
        sep = self.pick(("-", " ", "."))
        return sep.join(self.word() for _ in range(self.num(4, 5)))

    def token(self, n: int = 40) -> str:
        return self.urlsafe(n)

    def jwt(self, claims: dict[str, Any] | None = None) -> str:
        now = self.epoch()
        payload = claims or {"sub": self.uuid(), "iat": now, "exp": now + 3600}
        header = {"alg": "HS256", "typ": "JWT"}
        segs = [_b64url(json.dumps(d, separators=(",", ":")).encode()) for d in (header, payload)]
        return ".".join([*segs, self.b64url(32)])

    def rsa_private(self) -> str:
        der = bytes.fromhex("308204a40201000282010100") + self.raw(1180)
        return _der_pem("RSA PRIVATE KEY", der)

    def pkcs8_private(self) -> str:
        head = "308204bd020100300d06092a864886f70d0101010500048204a7308204a30201000282010100"
        return _der_pem("PRIVATE KEY", bytes.fromhex(head) + self.raw(1180))

    def ec_private(self) -> str:
        mid = bytes.fromhex("a00a06082a8648ce3d030107a144034200")
        der = bytes.fromhex("30770201010420") + self.raw(32) + mid + b"\x04" + self.raw(64)
        return _der_pem("EC PRIVATE KEY", der)

    def encrypted_private(self) -> str:
        der = bytes.fromhex("3082052f304906092a864886f70d01050d") + self.raw(1300)
        return _der_pem("ENCRYPTED PRIVATE KEY", der)

    def openssh_private(self) -> str:
        head = (
            b"openssh-key-v1\x00\x00\x00\x00\x04none\x00\x00\x00\x04none\x00\x00\x00\x00"
            b"\x00\x00\x00\x01\x00\x00\x00\x33\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20"
        )
        return _der_pem("OPENSSH PRIVATE KEY", head + self.raw(350), width=70)

    def pgp_private(self) -> str:
        body = base64.b64encode(b"\x95\x03\xc6\x04" + self.raw(960)).decode()
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        return (
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
            + "\n".join(lines)
            + f"\n={self.b64(3)}\n-----END PGP PRIVATE KEY BLOCK-----"
        )

    # -- vendor formats ---------------------------------------------------------------
    def aws_key_id(self, prefix: str = "AKIA") -> str:
        return prefix + self.chars(BASE32, 16)

    def aws_secret(self) -> str:
        return self.chars(ALNUM + "+/", 40)

    def aws_session_token(self) -> str:
        return "IQoJb3JpZ2luX2VjE" + self.chars(ALNUM + "+/", 340) + "=="

    def openai_key(self) -> str:
        if self.num(0, 2):
            return f"sk-proj-{self.urlsafe(74)}T3BlbkFJ{self.urlsafe(74)}"
        return f"sk-{self.alnum(20)}T3BlbkFJ{self.alnum(20)}"

    def anthropic_key(self) -> str:
        return f"sk-ant-api03-{self.urlsafe(93)}AA"

    def github_token(self, prefix: str = "ghp_") -> str:
        return prefix + self.alnum(36)

    def github_fine_pat(self) -> str:
        return f"github_pat_11{self.upper(20)}_{self.alnum(59)}"

    def gitlab_token(self, prefix: str = "glpat-") -> str:
        return prefix + self.urlsafe(20)

    def stripe_key(self, prefix: str = "sk_live_") -> str:
        return prefix + "51" + self.alnum(self.pick((22, 97)))

    def slack_bot(self) -> str:
        return f"xoxb-{self.digits(12)}-{self.digits(13)}-{self.alnum(24)}"

    def slack_user(self) -> str:
        return f"xoxp-{self.digits(12)}-{self.digits(12)}-{self.digits(13)}-{self.hex(32)}"

    def slack_webhook(self) -> str:
        return (
            f"https://hooks.slack.com/services/T{self.chars(UPPER[:26], 8)}"
            f"/B{self.upper(10)}/{self.alnum(24)}"
        )

    def discord_webhook(self) -> str:
        return f"https://discord.com/api/webhooks/{self.digits(19)}/{self.urlsafe(68)}"

    def teams_webhook(self) -> str:
        return (
            f"https://{self.word()}.webhook.office.com/webhookb2/{self.uuid()}@{self.uuid()}"
            f"/IncomingWebhook/{self.hex(32)}/{self.uuid()}/V2{self.urlsafe(45)}"
        )

    def google_key(self) -> str:
        return "AIza" + self.urlsafe(35)

    def sendgrid_key(self) -> str:
        return f"SG.{self.urlsafe(22)}.{self.urlsafe(43)}"

    def azure_secret(self) -> str:
        return f"{self.alnum(3)}8Q~{self.chars(ALNUM + '~._-', 34)}"

    def azure_storage_key(self) -> str:
        return self.b64(64)

    def fcm_server_key(self) -> str:
        return f"AAAA{self.urlsafe(7)}:APA91b{self.urlsafe(134)}"

    def age_secret(self) -> str:
        return "AGE-SECRET-KEY-1" + self.chars("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)

    def totp_seed(self) -> str:
        return self.chars(BASE32, self.pick((16, 32)))

    def django_key(self) -> str:
        return self.chars(string.ascii_lowercase + string.digits + "!@#%^&*(-_=+)", 50)


def _render(parts: list[Part]) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    chunks: list[str] = []
    secrets: list[dict[str, Any]] = []
    lookalikes: list[dict[str, Any]] = []
    pos = 0
    for part in parts:
        if isinstance(part, str):
            chunks.append(part)
            pos += len(part)
            continue
        # duck-typed: the template modules may hold a second copy of this module's Span
        value, kind, role = part.value, part.kind, part.role
        if not value or not kind:
            raise ValueError(f"empty labelled span: {part!r}")
        span = {"start": pos, "end": pos + len(value), "kind": kind}
        if role == "secret":
            secrets.append(span)
        elif role == "lookalike":
            lookalikes.append(span)
        else:
            raise ValueError(f"bad role {role!r}")
        chunks.append(value)
        pos += len(value)
    return "".join(chunks), secrets, lookalikes


_BEFORE = (
    "",
    "",
    "",
    "",
    "why does this fail?\n\n",
    "can you clean this up a bit?\n\n",
    "quick question about this:\n\n",
    "this worked yesterday and now it doesn't:\n\n",
)
_AFTER = ("", "", "", "\nany idea what's wrong?\n", "\nthanks!\n")


def holdout4_templates() -> list[tuple[str, Template]]:
    """All (source, template) pairs, in a fixed order."""
    import secrets_holdout4_code as code
    import secrets_holdout4_code2 as code2
    import secrets_holdout4_code3 as code3
    import secrets_holdout4_code4 as code4
    import secrets_holdout4_config as config
    import secrets_holdout4_config2 as config2
    import secrets_holdout4_config3 as config3
    import secrets_holdout4_config4 as config4
    import secrets_holdout4_ops as ops
    import secrets_holdout4_ops2 as ops2
    import secrets_holdout4_ops3 as ops3
    import secrets_holdout4_ops4 as ops4

    return [
        *code.CODE_TEMPLATES,
        *code2.CODE2_TEMPLATES,
        *code3.CODE3_TEMPLATES,
        *code4.CODE4_TEMPLATES,
        *config.CONFIG_TEMPLATES,
        *config2.CONFIG2_TEMPLATES,
        *config3.CONFIG3_TEMPLATES,
        *config4.CONFIG4_TEMPLATES,
        *ops.OPS_TEMPLATES,
        *ops2.OPS2_TEMPLATES,
        *ops3.OPS3_TEMPLATES,
        *ops4.OPS4_TEMPLATES,
    ]


def holdout4_items(rounds: int = 2) -> list[dict[str, Any]]:
    """Draw every template `rounds` times; return labelled items."""
    templates = holdout4_templates()
    names = [t.__name__ for _, t in templates]
    if len(set(names)) != len(names):
        raise ValueError("duplicate template names")
    items: list[dict[str, Any]] = []
    for rnd in range(rounds):
        for source, template in templates:
            rng = random.Random(f"{SEED}:{source}:{template.__name__}:{rnd}")
            parts = template(Fake(rng))
            parts = [rng.choice(_BEFORE), *parts, rng.choice(_AFTER)]
            text, secrets, lookalikes = _render(parts)
            items.append(
                {
                    "id": f"holdout4-{len(items) + 1:03d}",
                    "source": source,
                    "text": text,
                    "secrets": secrets,
                    "lookalikes": lookalikes,
                }
            )
    return items
