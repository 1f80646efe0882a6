"""Writes the labelled secrets corpus, deterministically: tests/data/secrets_corpus/corpus.jsonl.

Each line is one snippet as a coding assistant receives it (a ``.env`` file, settings, shell
history, logs, lock files, a pasted key, a support ticket) with the exact character spans of
what must go and of what must stay:

    {"id": "env_file-003", "source": "env_file", "text": "...",
     "secrets":    [{"start": 120, "end": 171, "kind": "openai_key"}, ...],
     "lookalikes": [{"start": 240, "end": 280, "kind": "git_sha"}, ...]}

``secrets`` spans cover the secret value only (not the variable name, quotes or ``Bearer``);
a PEM key's span is the whole block; a password in a URL is the password alone. ``lookalikes``
are spans a scrubber must keep (hashes, ids, fixtures, versions, placeholders). Text outside
both is unlabelled, and a detection there is a false positive too.

Every value is random (seeded) and fake; nothing is a real credential. ``--check`` regenerates
the corpus in memory and fails if the committed file differs.

    .venv/bin/python scripts/secrets_corpus.py            # rewrite the file
    .venv/bin/python scripts/secrets_corpus.py --check    # the file is what the seed makes
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import string
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "tests/data/secrets_corpus"
SEED = 47
ROUNDS = 7  # each template is drawn this many times, with fresh values
HOLDOUT_SEED = 4747
HOLDOUT_ROUNDS = 5

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


def env_file(b: Snippet, f: Fake) -> None:
    b.t(f.one(["my next.js app can't read these, what's wrong?\n", "", "# .env.local\n"]))
    pool: list[Callable[[], None]] = [
        lambda: b.line("OPENAI_API_KEY=", True, "openai_key", f.openai_key()),
        lambda: b.line("STRIPE_SECRET_KEY=", True, "stripe_key", f.stripe_key()),
        lambda: b.line("ANTHROPIC_API_KEY=", True, "anthropic_key", f.anthropic_key()),
        lambda: b.line("SESSION_SECRET=", True, "generic_secret", f.generic_secret()),
        lambda: b.line("SIGNING_KEY=", True, "generic_secret", f.pick(HEX, 64)),
        lambda: b.line("GITHUB_TOKEN=", True, "github_token", f.github_token()),
        lambda: b.line("SENDGRID_API_KEY=", True, "sendgrid_key", f.sendgrid_key()),
        lambda: b.line(
            "DATABASE_URL=postgres://app:",
            True,
            "password_in_url",
            f.url_password(),
            "@db.internal:5432/app\n",
        ),
        lambda: b.line("HF_TOKEN=", True, "huggingface_token", f.huggingface_token()),
    ]
    quiet: list[Callable[[], None]] = [
        lambda: b.t("NODE_ENV=development\nPORT=3000\n"),
        lambda: b.line("RELEASE_SHA=", False, "git_sha", f.git_sha()),
        lambda: b.line("APP_VERSION=", False, "version", f.version()),
        lambda: b.line("ANTHROPIC_API_KEY=", False, "placeholder", f.placeholder()),
        lambda: b.line("ASSET_HASH=", False, "md5", f.md5()),
        lambda: b.t("OPENAI_MODEL=gpt-4o-mini\nREDIS_URL=redis://localhost:6379/0\n"),
        lambda: b.line("TENANT_ID=", False, "uuid", f.uuid()),
    ]
    lines = f.r.sample(pool, 3) + f.r.sample(quiet, 3)
    f.r.shuffle(lines)
    for line in lines:
        line()


def django_settings(b: Snippet, f: Fake) -> None:
    b.t("# settings/production.py\nimport os\n\nSECRET_KEY = '")
    b.s("generic_secret", "django-insecure-" + f.pick(LOWER_DIGITS + "!@#%^&*(-_=+)", 50))
    b.t("'\nDEBUG = False\nALLOWED_HOSTS = ['shop.acme-corp.io']\n\nDATABASES = {\n")
    b.t("    'default': {\n        'ENGINE': 'django.db.backends.postgresql',\n")
    b.t("        'NAME': 'shop',\n        'USER': 'shop',\n        'PASSWORD': '")
    b.s("password", f.password())
    b.t("',\n        'HOST': 'db.internal',\n    }\n}\n\nAWS_ACCESS_KEY_ID = '")
    b.s("aws_access_key", f.aws_access_key())
    b.t("'\nAWS_SECRET_ACCESS_KEY = '")
    b.s("aws_secret", f.aws_secret())
    b.t("'\nAWS_STORAGE_BUCKET_NAME = 'acme-static'\nSTATIC_VERSION = '")
    b.n("short_sha", f.short_sha())
    b.t("'\nEMAIL_BACKEND = 'django.core.mail.backends.smtp.EmailBackend'\n")


def aws_credentials(b: Snippet, f: Fake) -> None:
    b.t("cat ~/.aws/credentials\n[default]\naws_access_key_id = ")
    b.s("aws_access_key", f.aws_access_key())
    b.t("\naws_secret_access_key = ")
    b.s("aws_secret", f.aws_secret())
    b.t("\nregion = eu-west-1\n\n[ci]\naws_access_key_id = ")
    b.s("aws_access_key", f.aws_access_key())
    b.t("\naws_secret_access_key = ")
    b.s("aws_secret", f.aws_secret())
    b.t("\n\nwhy does `aws s3 ls` say the profile could not be found?")


def shell_history(b: Snippet, f: Fake) -> None:
    n = f.r.randrange(300, 900)
    b.t(f"  {n}  git log --oneline -3\n  {n + 1}  git checkout ")
    b.n("git_sha", f.git_sha())
    b.t(f"\n  {n + 2}  export GITHUB_TOKEN=")
    b.s("github_token", f.github_token())
    b.t(f'\n  {n + 3}  curl -s -H "Authorization: Bearer ')
    b.s("bearer_token", f.bearer_token())
    b.t(f'" https://api.acme-corp.io/v2/orders\n  {n + 4}  docker pull ghcr.io/acme/api@sha256:')
    b.n("sha256", f.sha256())
    b.t(f'\n  {n + 5}  psql "postgresql://admin:')
    b.s("password_in_url", f.url_password())
    b.t(f'@10.2.0.14:5432/prod"\n  {n + 6}  kubectl logs ')
    b.n("pod_name", f.pod_name())
    b.t(f"\n  {n + 7}  npm version patch\n")


def app_logs(b: Snippet, f: Fake) -> None:
    b.t("2024-03-02T10:15:22.183Z INFO  [req ")
    b.n("uuid", f.uuid())
    b.t("] POST /v1/charges 200 182ms user=")
    b.s("email", f.email())
    b.t(" ip=")
    b.s("ip", f.public_ip())
    b.t("\n2024-03-02T10:15:22.201Z WARN  webhook ")
    b.s("slack_webhook", f.slack_webhook())
    b.t(" timed out (attempt 2)\n2024-03-02T10:15:23.004Z ERROR slack auth failed for token ")
    b.s("slack_token", f.slack_token())
    b.t("\n2024-03-02T10:15:23.010Z DEBUG build ")
    b.n("short_sha", f.short_sha())
    b.t(" version ")
    b.n("version", f.version())
    b.t(" trace_id=")
    b.n("md5", f.md5())
    b.t("\n")


def package_lock(b: Snippet, f: Fake) -> None:
    b.t('{\n  "name": "web",\n  "lockfileVersion": 3,\n  "packages": {\n')
    for name in f.r.sample(["react", "lodash", "zod", "axios", "vite", "esbuild"], 3):
        b.t(f'    "node_modules/{name}": {{\n      "version": "')
        b.n("version", f.version().lstrip("v"))
        b.t(f'",\n      "resolved": "https://registry.npmjs.org/{name}/-/{name}.tgz",\n')
        b.t('      "integrity": "')
        b.n("integrity_hash", f.integrity())
        b.t('"\n    },\n')
    b.t("  }\n}\nnpm ci fails with EINTEGRITY on one of these, which one?")


def requirements_hashes(b: Snippet, f: Fake) -> None:
    b.t("pip install --require-hashes -r requirements.txt fails:\n\n")
    for name in f.r.sample(["requests", "urllib3", "idna", "certifi", "charset-normalizer"], 3):
        b.t(f"{name}==")
        b.n("version", f.version().lstrip("v").split("-")[0])
        b.t(" \\\n    --hash=sha256:")
        b.n("sha256", f.sha256())
        b.t(" \\\n    --hash=sha256:")
        b.n("sha256", f.sha256())
        b.t("\n")


def openai_client(b: Snippet, f: Fake) -> None:
    b.t("```python\nfrom openai import OpenAI\n\n# TODO move to env; docs say OPENAI_API_KEY=")
    b.n("placeholder", "sk-...")
    b.t('\nclient = OpenAI(api_key="')
    b.s("openai_key", f.openai_key())
    b.t('")\nresp = client.chat.completions.create(model="gpt-4o", messages=msgs)\n```\n')
    b.t("I get 401 invalid_api_key. request id req_")
    b.n("md5", f.md5())


def anthropic_client(b: Snippet, f: Fake) -> None:
    b.t("```python\nimport anthropic\n\nclient = anthropic.Anthropic(api_key=")
    b.t('os.environ["ANTHROPIC_API_KEY"])\nbackup = anthropic.Anthropic(api_key="')
    b.s("anthropic_key", f.anthropic_key())
    b.t('")\nmsg = client.messages.create(model="claude-3-5-sonnet-20241022", max_tokens=1024)\n')
    b.t("```\nthe backup client works but the first one raises AuthenticationError\n")


def stripe_js(b: Snippet, f: Fake) -> None:
    b.t("// server/payments.ts\nimport Stripe from 'stripe';\n\nconst stripe = new Stripe('")
    b.s("stripe_key", f.stripe_key())
    b.t("', { apiVersion: '2023-10-16' });\nconst WEBHOOK_SECRET = '")
    b.s("generic_secret", "whsec_" + f.pick(ALNUM, 32))
    b.t("';\n\n// test fixture: base64 of the event body\nexport const FIXTURE = '")
    b.n("base64_fixture", f.base64_fixture())
    b.t("';\nexport const EXAMPLE_KEY = '")
    b.n("placeholder", "sk_test_XXXXXXXXXXXXXXXXXXXXXXXX")
    b.t("';\n")


def npmrc(b: Snippet, f: Fake) -> None:
    b.t("~/.npmrc:\n//registry.npmjs.org/:_authToken=")
    b.s("npm_token", f.npm_token())
    b.t("\n@acme:registry=https://npm.pkg.github.com\n//npm.pkg.github.com/:_authToken=")
    b.s("github_token", f.github_token())
    b.t("\n\nnpm install says 403 for @acme/ui")


def pypirc(b: Snippet, f: Fake) -> None:
    b.t("~/.pypirc\n[distutils]\nindex-servers = pypi\n\n[pypi]\nusername = __token__\n")
    b.t("password = ")
    b.s("pypi_token", f.pypi_token())
    b.t("\n\ntwine upload dist/* returns 403, why?")


def docker_config(b: Snippet, f: Fake) -> None:
    b.t('~/.docker/config.json\n{\n  "auths": {\n    "registry.acme-corp.io": {\n')
    b.t('      "auth": "')
    b.s("basic_auth", f.basic_auth())
    b.t('"\n    }\n  },\n  "credsStore": "desktop"\n}\n')


def private_key_paste(b: Snippet, f: Fake) -> None:
    b.t('ssh says `Load key "id_deploy": invalid format`. Here is the key file:\n\n')
    b.s("private_key_pem", f.private_key_pem())
    b.t("\n\nand the fingerprint is SHA256:")
    raw = bytes(f.r.randrange(256) for _ in range(32))
    b.n("key_fingerprint", base64.b64encode(raw).decode().rstrip("="))
    b.t("\n")


def jwt_debugging(b: Snippet, f: Fake) -> None:
    b.t("Decoding fails with `Signature verification failed`:\n\n")
    b.t("curl https://api.acme-corp.io/me -H 'Authorization: Bearer ")
    b.s("jwt", f.jwt())
    b.t("'\n\nconst secret = process.env.JWT_SECRET; // ")
    b.n("env_reference", "${JWT_SECRET}")
    b.t("\njwt.verify(token, secret, { algorithms: ['HS256'] });\n")


def git_log(b: Snippet, f: Fake) -> None:
    for _ in range(2):
        b.t("commit ")
        b.n("git_sha", f.git_sha())
        b.t("\nAuthor: Dev <")
        b.s("email", f.email())
        b.t(">\nDate:   Tue Mar 5 14:02:11 2024 +0100\n\n    fix: bump ")
        b.n("version", f.version())
        b.t("\n\n")
    b.t("Merge: ")
    b.n("short_sha", f.short_sha())
    b.t(" ")
    b.n("short_sha", f.short_sha())
    b.t("\n")


def k8s_manifest(b: Snippet, f: Fake) -> None:
    b.t("apiVersion: v1\nkind: Secret\nmetadata:\n  name: api-secrets\n")
    b.t("type: Opaque\nstringData:\n  DB_PASSWORD: ")
    b.s("password", f.password())
    b.t("\n  STRIPE_KEY: ")
    b.s("stripe_key", f.stripe_key())
    b.t("\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\n  uid: ")
    b.n("uuid", f.uuid())
    b.t("\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n")
    b.t("          image: ghcr.io/acme/api@sha256:")
    b.n("sha256", f.sha256())
    b.t("\n          env:\n            - name: DB_PASSWORD\n              value: ")
    b.n("env_reference", "{{ .Values.db.password }}")
    b.t("\n")


def docker_compose(b: Snippet, f: Fake) -> None:
    b.t("services:\n  db:\n    image: postgres:16.2-alpine\n    environment:\n")
    b.t("      POSTGRES_PASSWORD: ")
    b.s("password", f.password())
    b.t("\n  app:\n    build: .\n    environment:\n      - DATABASE_URL=mysql://root:")
    b.s("password_in_url", f.url_password())
    b.t("@db:3306/app\n      - GIT_COMMIT=")
    b.n("git_sha", f.git_sha())
    b.t("\n      - API_KEY=")
    b.n("env_reference", "${OPENAI_API_KEY}")
    b.t("\n")


def terraform(b: Snippet, f: Fake) -> None:
    b.t('provider "aws" {\n  region     = "us-east-1"\n  access_key = "')
    b.s("aws_access_key", f.aws_access_key())
    b.t('"\n  secret_key = "')
    b.s("aws_secret", f.aws_secret())
    b.t('"\n}\n\nresource "aws_s3_bucket" "logs" {\n  bucket = "acme-logs-')
    b.n("short_sha", f.short_sha())
    b.t('"\n}\n# terraform plan hangs on refreshing state\n')


def readme_placeholders(b: Snippet, f: Fake) -> None:
    b.t("## Setup\n\nCopy `.env.example` and fill in:\n\n```bash\nexport OPENAI_API_KEY=")
    b.n("placeholder", f.one(["sk-...", "sk-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]))
    b.t("\nexport GITHUB_TOKEN=")
    b.n("placeholder", f.one(["ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", "<token>"]))
    b.t("\nexport AWS_ACCESS_KEY_ID=")
    b.n("placeholder", "AKIAXXXXXXXXXXXXXXXX")
    b.t("\nexport SLACK_BOT_TOKEN=")
    b.n("placeholder", "xoxb-your-bot-token")
    b.t('\n```\n\nThen `api_key = "')
    b.n("placeholder", f.one(["YOUR_API_KEY", "your-api-key-here", "<your-api-key>"]))
    b.t('"` in `config.py`. Requires Python ')
    b.n("version", f.version())
    b.t(".\n")


def test_fixtures(b: Snippet, f: Fake) -> None:
    b.t("def test_signature_roundtrip():\n    payload = base64.b64decode('")
    b.n("base64_fixture", f.base64_fixture())
    b.t("')\n    assert hashlib.sha256(payload).hexdigest() == '")
    b.n("sha256", f.sha256())
    b.t("'\n    assert etag(payload) == '")
    b.n("md5", f.md5())
    b.t("'\n    client = Client(api_key='")
    b.n("placeholder", f.one(["REPLACE_ME", "YOUR_API_KEY", "********"]))
    b.t("')\n\n\ndef ")
    b.n("long_identifier", "test_refresh_token_is_rotated_after_expiry_window")
    b.t("():\n    ...\n")


def chat_anthropic(b: Snippet, f: Fake) -> None:
    b.t("I keep getting 401 from the Anthropic API with my key ")
    b.s("anthropic_key", f.anthropic_key())
    b.t(" even though the console shows it active. Am I sending the header wrong?")


def chat_gitlab(b: Snippet, f: Fake) -> None:
    b.t("the gitlab pipeline can't clone, I set CI token to ")
    b.s("gitlab_token", f.gitlab_token())
    b.t(" and the runner is ")
    b.n("pod_name", f.pod_name())


def chat_google(b: Snippet, f: Fake) -> None:
    b.t("My google maps key ")
    b.s("google_api_key", f.google_api_key())
    b.t(" returns REQUEST_DENIED on localhost, project id ")
    b.n("uuid", f.uuid())


def chat_telegram(b: Snippet, f: Fake) -> None:
    b.t("Telegram bot stopped answering. token is ")
    b.s("telegram_bot_token", f.telegram_bot_token())
    b.t(", webhook set to https://bots.acme-corp.io/tg, python-telegram-bot ")
    b.n("version", f.version())


def go_sum(b: Snippet, f: Fake) -> None:
    b.t("go: verifying module: checksum mismatch\n")
    for mod in f.r.sample(["golang.org/x/net", "github.com/spf13/cobra", "go.uber.org/zap"], 2):
        version = "v" + f.version().lstrip("v").split("-")[0]
        b.t(f"{mod} {version} ")
        b.n("go_sum_hash", f.go_sum_hash())
        b.t(f"\n{mod} {version}/go.mod ")
        b.n("go_sum_hash", f.go_sum_hash())
        b.t("\n")
    b.t('\nconst buildDigest = "')
    b.n("sha256", f.sha256())
    b.t('"\n')


def cargo_lock(b: Snippet, f: Fake) -> None:
    for name in f.r.sample(["serde", "tokio", "anyhow", "regex"], 2):
        b.t(f'[[package]]\nname = "{name}"\nversion = "')
        b.n("version", f.version().lstrip("v").split("-")[0])
        b.t('"\nsource = "registry+https://github.com/rust-lang/crates.io-index"\nchecksum = "')
        b.n("sha256", f.sha256())
        b.t('"\n\n')


def connection_strings(b: Snippet, f: Fake) -> None:
    b.t('MONGO_URI = "mongodb+srv://appuser:')
    b.s("password_in_url", f.url_password())
    b.t('@cluster0.x7kq2.mongodb.net/prod?retryWrites=true"\nBROKER = "amqp://worker:')
    b.s("password_in_url", f.url_password())
    b.t('@rabbit.internal:5672//"\nDOCS = "https://github.com/acme/api/blob/')
    b.n("git_sha", f.git_sha())
    b.t('/README.md"\nCACHE = "redis://localhost:6379/2"\n')


def azure_connection(b: Snippet, f: Fake) -> None:
    b.t('var conn = "DefaultEndpointsProtocol=https;AccountName=acmeprod;AccountKey=')
    b.s("azure_storage_key", f.azure_storage_key())
    b.t(';EndpointSuffix=core.windows.net";\nvar container = "uploads-')
    b.n("uuid", f.uuid())
    b.t('";\n// BlobServiceClient throws 403 AuthorizationFailure\n')


def http_dump(b: Snippet, f: Fake) -> None:
    b.t("> GET /api/v1/reports HTTP/1.1\n> Host: reports.acme-corp.io\n")
    b.t("> Authorization: Basic ")
    b.s("basic_auth", f.basic_auth())
    b.t("\n> User-Agent: curl/8.5.0\n> X-Request-Id: ")
    b.n("uuid", f.uuid())
    b.t('\n< HTTP/1.1 500 Internal Server Error\n< ETag: "')
    b.n("md5", f.md5())
    b.t('"\n< X-Served-By: ')
    b.n("pod_name", f.pod_name())
    b.t("\n")


def stack_trace(b: Snippet, f: Fake) -> None:
    b.t('Traceback (most recent call last):\n  File "/app/.venv/lib/python3.11/site-packages/')
    b.t('requests/adapters.py", line 486, in send\nrequests.exceptions.HTTPError: 401 Client')
    b.t(" Error for url: https://api.acme-corp.io/v1/sync?access_token=")
    b.s("bearer_token", f.pick(ALNUM, 40))
    b.t("&since=")
    b.n("version", "2024.03.01")
    b.t("\n<Response [401]> at 0x7f")
    b.n("memory_address", f.pick(HEX, 10))
    b.t(" in ")
    b.n("long_identifier", "handleOAuth2AuthorizationCodeGrantTokenResponse")
    b.t("\n")


def notebook_image(b: Snippet, f: Fake) -> None:
    raw = bytes(f.r.randrange(256) for _ in range(90))
    b.t('{"cell_type": "code", "execution_count": 7, "outputs": [{"data": {"image/png": "')
    b.n("base64_image", "iVBORw0KGgoAAAANSUhEUgAA" + base64.b64encode(raw).decode())
    b.t('"}, "output_type": "display_data"}], "id": "')
    b.n("short_sha", f.pick(HEX, 8))
    b.t('"}\nwhy is my notebook 40MB?')


def spring_yaml(b: Snippet, f: Fake) -> None:
    b.t("spring:\n  datasource:\n    url: jdbc:postgresql://db:5432/orders\n")
    b.t("    username: orders\n    password: ")
    b.s("password", f.password())
    b.t("\njwt:\n  secret: ")
    b.s("generic_secret", f.generic_secret())
    b.t("\n  expiration: 86400\nbuild:\n  commit: ")
    b.n("git_sha", f.git_sha())
    b.t("\n  instance-id: ")
    b.n("uuid", f.uuid())
    b.t("\n")


def ci_workflow(b: Snippet, f: Fake) -> None:
    b.t("jobs:\n  publish:\n    runs-on: ubuntu-22.04\n    steps:\n      - uses: actions/checkout@")
    b.n("git_sha", f.git_sha())
    b.t("\n      - run: npm publish\n        env:\n          NODE_AUTH_TOKEN: ")
    b.n("env_reference", "${{ secrets.NPM_TOKEN }}")
    b.t("\n      - run: ./notify.sh\n        env:\n          SLACK_TOKEN: ")
    b.s("slack_token", f.slack_token())
    b.t("\n")


def support_ticket(b: Snippet, f: Fake) -> None:
    b.t("Customer reply (ticket #")
    b.n("ticket_number", str(f.r.randrange(100000, 999999)))
    b.t("): please refund the charge on card ")
    b.s("credit_card", f.credit_card())
    b.t(", you can reach me at ")
    b.s("phone", f.phone())
    b.t(" or ")
    b.s("email", f.email())
    b.t(". Logged in from ")
    b.s("ip", f.public_ip())
    b.t(" on ")
    b.n("date", "2024-03-0" + str(f.r.randrange(1, 9)))
    b.t(".\nWrite a polite answer.\n")


def dockerfile(b: Snippet, f: Fake) -> None:
    b.t("FROM python:3.11-slim@sha256:")
    b.n("sha256", f.sha256())
    b.t("\nARG HF_TOKEN\nENV HF_TOKEN=")
    b.s("huggingface_token", f.huggingface_token())
    b.t("\nRUN pip install torch==")
    b.n("version", "2.3.1")
    b.t(" && huggingface-cli download meta-llama/Llama-3-8B\n")
    b.t("LABEL org.opencontainers.image.revision=")
    b.n("git_sha", f.git_sha())
    b.t("\n")


def css_build(b: Snippet, f: Fake) -> None:
    b.t(".btn-primary { color: #")
    b.n("hex_colour", f.pick(HEX, 6))
    b.t("; }\n.")
    b.n("long_identifier", "kMaxConcurrentStreamsPerConnectionDefault")
    b.t(" { display: none; }\n/* built: assets/index-")
    b.n("short_sha", f.pick(HEX, 8))
    b.t(".js, assets/vendor-")
    b.n("short_sha", f.pick(HEX, 8))
    b.t(".css */\n")


def sql_dump(b: Snippet, f: Fake) -> None:
    b.t("INSERT INTO users (id, email, created_at) VALUES\n  ('")
    b.n("uuid", f.uuid())
    b.t("', '")
    b.s("email", f.email())
    b.t("', '2024-02-11'),\n  ('")
    b.n("uuid", f.uuid())
    b.t("', '")
    b.s("email", f.email())
    b.t("', '2024-02-12');\n-- migration ")
    b.n("md5", f.md5())
    b.t("\n")


def service_tokens(b: Snippet, f: Fake) -> None:
    b.t("config = {\n    'sendgrid': '")
    b.s("sendgrid_key", f.sendgrid_key())
    b.t("',\n    'slack_webhook': '")
    b.s("slack_webhook", f.slack_webhook())
    b.t("',\n    'twilio_auth_token': '")
    b.s("generic_secret", f.pick(HEX, 32))
    b.t("',\n    'twilio_account_sid': 'AC")
    b.n("account_id", f.pick(HEX, 32))
    b.t("',\n    'page_size': 50,\n}\n")


def pagination_and_ids(b: Snippet, f: Fake) -> None:
    b.t('{"items": [...], "nextPageToken": "')
    raw = json.dumps({"offset": f.r.randrange(1000), "ts": f.r.randrange(10**9)}).encode()
    b.n("pagination_cursor", base64.urlsafe_b64encode(raw).decode())
    b.t('", "requestId": "')
    b.n("uuid", f.uuid())
    b.t('", "etag": "')
    b.n("md5", f.md5())
    b.t('"}\nhow do I loop over all pages with this API?\n')


TEMPLATES: tuple[Template, ...] = (
    env_file,
    django_settings,
    aws_credentials,
    shell_history,
    app_logs,
    package_lock,
    requirements_hashes,
    openai_client,
    anthropic_client,
    stripe_js,
    npmrc,
    pypirc,
    docker_config,
    private_key_paste,
    jwt_debugging,
    git_log,
    k8s_manifest,
    docker_compose,
    terraform,
    readme_placeholders,
    test_fixtures,
    chat_anthropic,
    chat_gitlab,
    chat_google,
    chat_telegram,
    go_sum,
    cargo_lock,
    connection_strings,
    azure_connection,
    http_dump,
    stack_trace,
    notebook_image,
    spring_yaml,
    ci_workflow,
    support_ticket,
    dockerfile,
    css_build,
    sql_dump,
    service_tokens,
    pagination_and_ids,
)


# ---------------------------------------------------------------- held out
# Written after the scrubber was tuned on the templates above, and measured once: phrasings and
# formats those do not use, to show how far the figures carry beyond the text they were
# tuned on (docs/secrets.md).


def h_rails_credentials(b: Snippet, f: Fake) -> None:
    b.t("# config/credentials.yml.enc (decrypted with rails credentials:show)\nsecret_key_base: ")
    b.s("generic_secret", f.pick(HEX, 128))
    b.t("\naws:\n  access_key_id: ")
    b.s("aws_access_key", f.aws_access_key())
    b.t("\n  secret_access_key: ")
    b.s("aws_secret", f.aws_secret())
    b.t("\nactive_storage_digest: ")
    b.n("sha256", f.sha256())
    b.t("\n")


def h_java_properties(b: Snippet, f: Fake) -> None:
    b.t("spring.datasource.url=jdbc:mysql://db:3306/shop\nspring.datasource.username=shop\n")
    b.t("spring.datasource.password=")
    b.s("password", f.password())
    b.t("\nspring.mail.password=")
    b.s("password", f.password())
    b.t("\napp.jwt.secret=")
    b.s("generic_secret", base64.b64encode(bytes(f.r.randrange(256) for _ in range(48))).decode())
    b.t("\napp.build.revision=")
    b.n("git_sha", f.git_sha())
    b.t("\n")


def h_git_remote(b: Snippet, f: Fake) -> None:
    b.t("$ git remote -v\norigin  https://x-access-token:")
    b.s("github_token", "ghs_" + f.pick(ALNUM, 36))
    b.t("@github.com/acme/infra.git (fetch)\n$ git describe --tags\n")
    b.n("version", f"v{f.r.randrange(1, 9)}.{f.r.randrange(20)}.{f.r.randrange(20)}")
    b.t("-14-g")
    b.n("short_sha", f.pick(HEX, 7))
    b.t("\n$ git rev-parse HEAD\n")
    b.n("git_sha", f.git_sha())
    b.t("\n")


def h_kubeconfig(b: Snippet, f: Fake) -> None:
    b.t("users:\n- name: ci\n  user:\n    token: ")
    b.s("jwt", f.jwt())
    b.t("\nclusters:\n- cluster:\n    server: https://")
    b.s("ip", f.public_ip())
    b.t(":6443\n  name: prod\ncurrent-context: prod  # kubectl get pods says Unauthorized\n")


def h_gcp_service_account(b: Snippet, f: Fake) -> None:
    pem = f.private_key_pem().replace("\n", "\\n")
    b.t('{\n  "type": "service_account",\n  "project_id": "acme-prod-4411",\n')
    b.t('  "private_key_id": "')
    b.n("key_id", f.pick(HEX, 40))
    b.t('",\n  "private_key": "')
    b.s("private_key_pem", pem)
    b.t('\\n",\n  "client_id": "')
    b.n("account_id", f.pick(string.digits, 21))
    b.t('",\n  "token_uri": "https://oauth2.googleapis.com/token"\n}\n')


def h_http_headers(b: Snippet, f: Fake) -> None:
    b.t("requests.post(url, headers={'X-API-Key': '")
    b.s("generic_secret", f.pick(ALNUM, 32))
    b.t("', 'X-Request-ID': '")
    b.n("uuid", f.uuid())
    b.t("'})\n# and with anthropic directly:\n")
    b.t("curl https://api.anthropic.com/v1/messages -H 'x-api-key: ")
    b.s("anthropic_key", f.anthropic_key())
    b.t("' -H 'anthropic-version: 2023-06-01'\n")


def h_access_log(b: Snippet, f: Fake) -> None:
    b.s("ip", f.public_ip())
    b.t(' - - [12/Mar/2024:09:14:02 +0000] "GET /login?user=')
    b.s("email", f.email())
    b.t("&password=")
    b.s("password", f.password().replace("#", "").replace("!", "") + "x")
    b.t(' HTTP/1.1" 302 0 "-" "Mozilla/5.0"\n')
    b.s("ip", f.public_ip())
    b.t(' - - [12/Mar/2024:09:14:03 +0000] "GET /static/app.')
    b.n("short_sha", f.pick(HEX, 8))
    b.t('.js HTTP/1.1" 200 48213\n')


def h_heroku_and_uuid_keys(b: Snippet, f: Fake) -> None:
    b.t("export HEROKU_API_KEY=")
    b.s("generic_secret", f.uuid())
    b.t("\nexport DEPLOY_ID=")
    b.n("uuid", f.uuid())
    b.t("\nexport STRIPE_PUBLISHABLE_KEY=pk_live_")
    b.n("public_key", f.pick(ALNUM, 24))
    b.t("\nexport STRIPE_API_KEY=")
    b.s("stripe_key", "sk_live_" + f.pick(ALNUM, 24))
    b.t("\n")


def h_discord_bot(b: Snippet, f: Fake) -> None:
    token = (
        f.one(["M", "N", "O"])
        + f.pick(ALNUM, 23)
        + "."
        + f.pick(B64URL, 6)
        + "."
        + f.pick(B64URL, 27)
    )
    b.t("const client = new Client({ intents: [GatewayIntentBits.Guilds] });\nclient.login('")
    b.s("discord_bot_token", token)
    b.t("');\n// guild id ")
    b.n("account_id", f.pick(string.digits, 18))
    b.t(" never fires ready\n")


def h_mailchimp_php(b: Snippet, f: Fake) -> None:
    b.t("<?php\n$mailchimp = new MailchimpMarketing\\ApiClient();\n$mailchimp->setConfig([\n")
    b.t("  'apiKey' => '")
    b.s("mailchimp_key", f.pick(HEX, 32) + "-us" + str(f.r.randrange(1, 21)))
    b.t("',\n  'server' => 'us6',\n]);\n$listId = '")
    b.n("account_id", f.pick(HEX, 10))
    b.t("';\n")


def h_sql_server(b: Snippet, f: Fake) -> None:
    b.t('"ConnectionStrings": {\n  "Default": "Server=tcp:acme.database.windows.net,1433;')
    b.t("User ID=app;Password=")
    b.s("password", f.password().replace(";", ""))
    b.t(';Encrypt=True;"\n},\n"ApplicationInsights": { "InstrumentationKey": "')
    b.n("uuid", f.uuid())
    b.t('" }\n')


def h_cli_flags(b: Snippet, f: Fake) -> None:
    user_pw = f.url_password()
    b.t("mysql -h db.internal -u root -p")
    b.s("password", f.pick(ALNUM, 14))
    b.t(" shop < dump.sql\ncurl -u deploy:")
    b.s("password", user_pw)
    b.t(" https://ci.acme-corp.io/job/build/")
    b.n("ticket_number", str(f.r.randrange(1000, 9999)))
    b.t("/\n")


def h_lockfiles(b: Snippet, f: Fake) -> None:
    b.t('# .terraform.lock.hcl\nprovider "registry.terraform.io/hashicorp/aws" {\n  version = "')
    b.n("version", f"5.{f.r.randrange(60)}.0")
    b.t('"\n  hashes = [\n    "')
    b.n("go_sum_hash", f.go_sum_hash())
    b.t('",\n    "zh:')
    b.n("sha256", f.sha256())
    b.t('",\n  ]\n}\n<script src="/app.js" integrity="sha384-')
    raw = bytes(f.r.randrange(256) for _ in range(48))
    b.n("integrity_hash", base64.b64encode(raw).decode())
    b.t('"></script>\n')


def h_openapi_and_types(b: Snippet, f: Fake) -> None:
    b.t("components:\n  securitySchemes:\n    ApiKeyAuth:\n      type: apiKey\n")
    b.t("      in: header\n      name: X-API-Key\nclass Settings(BaseSettings):\n")
    b.t("    api_key: SecretStr\n    password_reset_timeout: int = 3600\n    token_url: str = ")
    b.t('"https://auth.acme-corp.io/oauth/token"\n    model_revision: str = "')
    b.n("git_sha", f.git_sha())
    b.t('"\n')


def h_notebook_keys(b: Snippet, f: Fake) -> None:
    b.t('{"cell_type": "code", "source": ["import openai\\n", "openai.api_key = \'')
    b.s("openai_key", f.openai_key())
    b.t("'\\n\", \"HF_TOKEN = '")
    b.s("huggingface_token", f.huggingface_token())
    b.t('\'"], "metadata": {"id": "')
    b.n("short_sha", f.pick(HEX, 12))
    b.t('"}}\n')


def h_css_fonts(b: Snippet, f: Fake) -> None:
    raw = bytes(f.r.randrange(256) for _ in range(60))
    b.t("@font-face {\n  font-family: 'Inter';\n  src: url(data:font/woff2;base64,")
    b.n("base64_image", "d09GMgABAAAAA" + base64.b64encode(raw).decode())
    b.t(") format('woff2');\n}\n.icon-")
    b.n("short_sha", f.pick(HEX, 8))
    b.t(" { color: #")
    b.n("hex_colour", f.pick(HEX, 6))
    b.t("; }\n")


HOLDOUT_TEMPLATES: tuple[Template, ...] = (
    h_rails_credentials,
    h_java_properties,
    h_git_remote,
    h_kubeconfig,
    h_gcp_service_account,
    h_http_headers,
    h_access_log,
    h_heroku_and_uuid_keys,
    h_discord_bot,
    h_mailchimp_php,
    h_sql_server,
    h_cli_flags,
    h_lockfiles,
    h_openapi_and_types,
    h_notebook_keys,
    h_css_fonts,
)


def build_corpus(
    templates: tuple[Template, ...] = TEMPLATES, seed: int = SEED, rounds: int = ROUNDS
) -> list[dict[str, Any]]:
    """Every template drawn ``rounds`` times from one seeded generator, in a fixed order."""
    fake = Fake(random.Random(seed))
    items: list[dict[str, Any]] = []
    for round_ in range(rounds):
        for template in templates:
            snippet = Snippet(template.__name__)
            template(snippet, fake)
            items.append(
                {
                    "id": f"{template.__name__}-{round_:03d}",
                    "source": template.__name__,
                    "text": snippet.text,
                    "secrets": snippet.secrets,
                    "lookalikes": snippet.lookalikes,
                }
            )
    return items


def corpora() -> dict[str, list[dict[str, Any]]]:
    """File name -> items: the tuning corpus and the held-out one."""
    return {
        "corpus.jsonl": build_corpus(),
        "holdout.jsonl": build_corpus(HOLDOUT_TEMPLATES, HOLDOUT_SEED, HOLDOUT_ROUNDS),
    }


def render(items: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_DIR, help="the corpus folder")
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    stale = []
    for name, items in corpora().items():
        path, text = args.out / name, render(items)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        kinds = Counter(s["kind"] for item in items for s in item["secrets"])
        negatives = Counter(s["kind"] for item in items for s in item["lookalikes"])
        print(f"wrote {len(items)} snippets to {path}")
        print(f"  secrets {sum(kinds.values())}: {dict(sorted(kinds.items()))}")
        print(f"  lookalikes {sum(negatives.values())}: {dict(sorted(negatives.items()))}")
    if args.check:
        print("\n".join(f"{p} differs from the generator" for p in stale) or "corpus up to date")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
