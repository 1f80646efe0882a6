"""The labelled secrets corpus's building blocks (scripts/secrets_corpus.py): a snippet that
records the spans of what must go and what must stay as it is written, and the seeded maker of
fake values (keys, tokens, hashes, ids) in each vendor's format. Nothing here is a real
credential."""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ALNUM = string.ascii_letters + string.digits
LOWER_DIGITS = string.ascii_lowercase + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"


@dataclass
class Snippet:
    """A text built piece by piece, with the span of every labelled piece."""

    source: str
    parts: list[str] = field(default_factory=list)
    secrets: list[dict[str, Any]] = field(default_factory=list)
    lookalikes: list[dict[str, Any]] = field(default_factory=list)
    length: int = 0

    def t(self, text: str) -> None:
        self.parts.append(text)
        self.length += len(text)

    def _span(self, into: list[dict[str, Any]], kind: str, value: str) -> None:
        into.append({"start": self.length, "end": self.length + len(value), "kind": kind})
        self.t(value)

    def s(self, kind: str, value: str) -> None:
        """A secret (or PII) that must be redacted."""
        self._span(self.secrets, kind, value)

    def n(self, kind: str, value: str) -> None:
        """A lookalike that must survive."""
        self._span(self.lookalikes, kind, value)

    def line(self, before: str, secret: bool, kind: str, value: str, after: str = "\n") -> None:
        """``before``, a secret (or a lookalike) of ``kind``, ``after``."""
        self.t(before)
        (self.s if secret else self.n)(kind, value)
        self.t(after)

    @property
    def text(self) -> str:
        return "".join(self.parts)


class Fake:
    """Random, fake but real-looking values."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def pick(self, alphabet: str, n: int) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def one(self, options: list[str]) -> str:
        return self.r.choice(options)

    # -------------------------------------------------------------- secrets
    def aws_access_key(self) -> str:
        return self.one(["AKIA", "AKIA", "AKIA", "ASIA"]) + self.pick(UPPER_DIGITS, 16)

    def aws_secret(self) -> str:
        return self.pick(ALNUM + "/+", 40)

    def github_token(self) -> str:
        kind = self.one(["ghp", "ghp", "gho", "ghs", "pat"])
        if kind == "pat":
            return "github_pat_11" + self.pick(UPPER_DIGITS, 20) + "_" + self.pick(ALNUM, 59)
        return kind + "_" + self.pick(ALNUM, 36)

    def gitlab_token(self) -> str:
        return "glpat-" + self.pick(ALNUM + "-_", 20)

    def openai_key(self) -> str:
        kind = self.one(["proj", "proj", "legacy", "svcacct"])
        if kind == "legacy":
            return "sk-" + self.pick(ALNUM, 20) + "T3BlbkFJ" + self.pick(ALNUM, 20)
        return f"sk-{kind}-" + self.pick(B64URL, 74) + "T3BlbkFJ" + self.pick(B64URL, 74)

    def anthropic_key(self) -> str:
        return "sk-ant-api03-" + self.pick(B64URL, 93) + "AA"

    def slack_token(self) -> str:
        prefix = self.one(["xoxb", "xoxb", "xoxp"])
        digits = "-".join(self.pick(string.digits, n) for n in (12, 13))
        tail = self.pick(ALNUM, 24) if prefix == "xoxb" else self.pick(HEX, 32)
        if prefix == "xoxp":
            digits += "-" + self.pick(string.digits, 13)
        return f"{prefix}-{digits}-{tail}"

    def slack_webhook(self) -> str:
        return (
            "https://hooks.slack.com/services/T"
            + self.pick(UPPER_DIGITS, 8)
            + "/B"
            + self.pick(UPPER_DIGITS, 10)
            + "/"
            + self.pick(ALNUM, 24)
        )

    def stripe_key(self) -> str:
        prefix = self.one(["sk_live_", "sk_live_", "rk_live_", "sk_test_"])
        return prefix + "51" + self.pick(ALNUM, self.r.choice([22, 97]))

    def google_api_key(self) -> str:
        return "AIza" + self.pick(B64URL, 35)

    def huggingface_token(self) -> str:
        return "hf_" + self.pick(string.ascii_letters, 34)

    def sendgrid_key(self) -> str:
        return "SG." + self.pick(B64URL, 22) + "." + self.pick(B64URL, 43)

    def npm_token(self) -> str:
        return "npm_" + self.pick(ALNUM, 36)

    def pypi_token(self) -> str:
        return "pypi-AgEIcHlwaS5vcmc" + self.pick(B64URL, 150)

    def telegram_bot_token(self) -> str:
        return self.pick(string.digits, 10) + ":AA" + self.pick(B64URL, 33)

    def azure_storage_key(self) -> str:
        return self.pick(B64, 86) + "=="

    def jwt(self) -> str:
        def part(obj: dict[str, object]) -> str:
            raw = json.dumps(obj, separators=(",", ":")).encode()
            return base64.urlsafe_b64encode(raw).decode().rstrip("=")

        header = part({"alg": self.one(["HS256", "RS256"]), "typ": "JWT"})
        payload = part(
            {
                "sub": self.pick(string.digits, 8),
                "email": self.email(),
                "iat": 1_700_000_000 + self.r.randrange(10**7),
                "exp": 1_710_000_000 + self.r.randrange(10**7),
            }
        )
        return f"{header}.{payload}.{self.pick(B64URL, 43)}"

    def private_key_pem(self) -> str:
        label = self.one(
            ["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY"]
        )
        body_bytes = bytes(self.r.randrange(256) for _ in range(48 * self.r.randrange(5, 14)))
        body = base64.b64encode(body_bytes).decode()
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"

    def password(self) -> str:
        style = self.r.randrange(4)
        words = ["Summer", "falcon", "Orange", "tiger", "Kayak", "maple", "Winter", "rocket"]
        if style == 0:
            return self.one(words) + str(self.r.randrange(1990, 2026)) + self.one(["!", "#", "$"])
        if style == 1:
            return self.pick(ALNUM + "!#%^*", self.r.randrange(12, 20))
        if style == 2:
            return "-".join(self.one(words).lower() for _ in range(3)) + str(self.r.randrange(99))
        return self.one(words) + self.one(["_", "."]) + self.pick(ALNUM, 8)

    def url_password(self) -> str:
        style = self.r.randrange(3)
        if style == 0:
            return self.pick(ALNUM, self.r.randrange(12, 24))
        if style == 1:
            return self.one(["Winter", "Falcon", "Maple"]) + str(self.r.randrange(10, 99)) + "-db"
        return self.pick(ALNUM + "-_.~", 16)

    def generic_secret(self) -> str:
        style = self.r.randrange(5)
        if style == 0:
            return "django-insecure-" + self.pick(LOWER_DIGITS + "!@#%^&*(-_=+)", 50)
        if style == 1:
            return self.pick(HEX, 64)  # openssl rand -hex 32
        if style == 2:
            return base64.b64encode(bytes(self.r.randrange(256) for _ in range(32))).decode()
        if style == 3:
            return "whsec_" + self.pick(ALNUM, 32)
        return self.pick(HEX, 32)

    def bearer_token(self) -> str:
        return self.one(["", "at_", "pat-"]) + self.pick(ALNUM, self.r.randrange(32, 48))

    def basic_auth(self) -> str:
        user = self.one(["deploy", "ci-bot", "admin", "svc_reports"])
        return base64.b64encode(f"{user}:{self.url_password()}".encode()).decode()

    # -------------------------------------------------------------- PII
    def email(self) -> str:
        first = self.one(["maria", "jon", "priya", "wei", "fatima", "lukas", "ana", "tom"])
        last = self.one(["schulz", "okafor", "nguyen", "rossi", "kowalski", "silva", "berg"])
        sep = self.one([".", "_", ""])
        domain = self.one(["acme-corp.io", "gmail.com", "fastmail.fm", "globex.de", "initech.co"])
        return f"{first}{sep}{last}@{domain}"

    def phone(self) -> str:
        style = self.r.randrange(3)
        if style == 0:
            return f"+1 {self.one(['415', '212', '646'])} 555 01{self.pick(string.digits, 2)}"
        if style == 1:
            return f"+44 20 7946 0{self.pick(string.digits, 3)}"
        return f"({self.one(['312', '617', '303'])}) 555-01{self.pick(string.digits, 2)}"

    def credit_card(self) -> str:
        digits = [4] + [self.r.randrange(10) for _ in range(14)]
        total = 0
        for i, d in enumerate(reversed(digits)):
            if i % 2 == 0:
                d = d * 2 - 9 if d > 4 else d * 2
            total += d
        digits.append((10 - total % 10) % 10)
        text = "".join(map(str, digits))
        if self.r.random() < 0.5:
            return " ".join(text[i : i + 4] for i in range(0, 16, 4))
        return text

    def public_ip(self) -> str:
        first = self.one(["203.0.113", "198.51.100", "192.0.2", "34.102.7", "52.14.88"])
        return f"{first}.{self.r.randrange(1, 255)}"

    # -------------------------------------------------------------- lookalikes
    def git_sha(self) -> str:
        return self.pick(HEX, 40)

    def short_sha(self) -> str:
        return self.pick(HEX, self.r.choice([7, 8, 12]))

    def sha256(self) -> str:
        return self.pick(HEX, 64)

    def md5(self) -> str:
        return self.pick(HEX, 32)

    def uuid(self) -> str:
        h = self.pick(HEX, 32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:]}"

    def integrity(self) -> str:
        raw = bytes(self.r.randrange(256) for _ in range(64))
        return "sha512-" + base64.b64encode(raw).decode()

    def go_sum_hash(self) -> str:
        raw = bytes(self.r.randrange(256) for _ in range(32))
        return "h1:" + base64.b64encode(raw).decode()

    def base64_fixture(self) -> str:
        plain = self.one(
            [
                '{"user_id": 42, "role": "admin", "scopes": ["read", "write"]}',
                "The quick brown fox jumps over the lazy dog, again and again.",
                '{"event": "order.created", "order": {"id": 1017, "total": "19.99"}}',
                "hello world from the integration test fixture, line one",
                '<?xml version="1.0"?><note><to>Tove</to><body>Hi</body></note>',
            ]
        )
        return base64.b64encode(plain.encode()).decode()

    def version(self) -> str:
        a, b, c = self.r.randrange(0, 20), self.r.randrange(0, 40), self.r.randrange(0, 30)
        return self.one([f"{a}.{b}.{c}", f"v{a}.{b}.{c}", f"{a}.{b}.{c}-rc.{c % 4}"])

    def pod_name(self) -> str:
        return (
            self.one(["web", "api", "worker"])
            + "-"
            + self.pick(LOWER_DIGITS, 10)
            + "-"
            + self.pick(LOWER_DIGITS, 5)
        )

    def long_identifier(self) -> str:
        return self.one(
            [
                "AbstractSingletonProxyFactoryBean",
                "test_refresh_token_is_rotated_after_expiry_window",
                "PAYMENT_INTENT_REQUIRES_ACTION_TIMEOUT_SECONDS",
                "handleOAuth2AuthorizationCodeGrantTokenResponse",
                "org.springframework.security.oauth2.client.registration",
                "kMaxConcurrentStreamsPerConnectionDefault",
            ]
        )

    def placeholder(self) -> str:
        return self.one(
            [
                "sk-...",
                "YOUR_API_KEY",
                "<your-api-key>",
                "your-api-key-here",
                "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                "AKIAXXXXXXXXXXXXXXXX",
                "REPLACE_ME",
                "<token>",
                "xoxb-your-bot-token",
                "sk_test_XXXXXXXXXXXXXXXXXXXXXXXX",
                "********",
            ]
        )

    def env_reference(self) -> str:
        return self.one(
            [
                "${OPENAI_API_KEY}",
                "${{ secrets.NPM_TOKEN }}",
                "{{ .Values.db.password }}",
                "$GITHUB_TOKEN",
                "%(DB_PASSWORD)s",
            ]
        )


Template = Callable[[Snippet, Fake], None]
