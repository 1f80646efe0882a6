"""The third held-out secrets set, written blind to the scrubber's rules (no file under
traffic/scrub/, no earlier template or held-out set was read while writing it): snippets an IDE
user pastes into a coding assistant, each labelled with the spans that must be redacted
(secrets) and those that must survive (lookalikes). Templates: secrets_holdout3_code*.py
(source code), secrets_holdout3_config*.py (configuration), secrets_holdout3_ops*.py (shell,
logs, HTTP, docs); here, the seeded maker of fake values in each vendor's public format, and
the assembly. Values are fake; the fixed strings labelled ``vendor_example_key`` are examples
vendors print in their own documentation.

    .venv/bin/python scripts/secrets_eval.py --corpus --holdout3
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections.abc import Callable
from typing import Any

SEED = 20250703
ROUNDS = 2  # every template is drawn this many times, each with its own values

UPPER = string.ascii_uppercase
LOWER = string.ascii_lowercase
DIGITS = string.digits
ALNUM = string.ascii_letters + DIGITS
LOWER_DIGITS = LOWER + DIGITS
UPPER_DIGITS = UPPER + DIGITS
HEX = "0123456789abcdef"
B32 = UPPER + "234567"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"

Part = str | tuple[str, str, str]
Template = Callable[["Fake3"], list[Part]]


def S(kind: str, value: str) -> Part:
    """A secret of ``kind``: must be redacted."""
    return ("s", kind, value)


def N(kind: str, value: str) -> Part:
    """A lookalike of ``kind``: must survive."""
    return ("n", kind, value)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def b64url(obj: dict[str, Any]) -> str:
    raw = json.dumps(obj, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class Fake3:
    """Fake values in real public formats, from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def pick(self, alphabet: str, n: int) -> str:
        return "".join(self.r.choice(alphabet) for _ in range(n))

    def one(self, options: list[str]) -> str:
        return self.r.choice(options)

    def num(self, low: int, high: int) -> int:
        return self.r.randrange(low, high + 1)

    def raw(self, n: int) -> bytes:
        return bytes(self.r.randrange(256) for _ in range(n))

    # ------------------------------------------------------------ cloud
    def aws_key_id(self) -> str:
        return self.one(["AKIA", "AKIA", "ASIA"]) + self.pick(B32, 16)

    def aws_secret(self) -> str:
        return self.pick(ALNUM + "+/", 40)

    def aws_session_token(self) -> str:
        return "IQoJb3JpZ2luX2VjE" + self.pick(B64, self.num(280, 340)) + "=="

    def azure_storage_key(self) -> str:
        return b64(self.raw(64))

    def azure_client_secret(self) -> str:
        return self.pick(ALNUM, 3) + "8Q~" + self.pick(ALNUM + "~._-", 34)

    def azure_sas_sig(self) -> str:
        return b64(self.raw(32)).replace("+", "%2B").replace("/", "%2F").replace("=", "%3D")

    def alibaba_key_id(self) -> str:
        return "LTAI5t" + self.pick(ALNUM, 18)

    def gcp_oauth_secret(self) -> str:
        return "GOCSPX-" + self.pick(B64URL, 28)

    def google_api_key(self) -> str:
        return "AIza" + self.pick(B64URL, 35)

    def google_access_token(self) -> str:
        return "ya29.a0" + self.pick(B64URL, self.num(150, 190))

    def google_refresh_token(self) -> str:
        return "1//0" + self.pick(ALNUM, 1) + self.pick(B64URL, 98)

    def digitalocean(self) -> str:
        return self.one(["dop_v1_", "dop_v1_", "doo_v1_"]) + self.pick(HEX, 64)

    def heroku_key(self) -> str:
        if self.r.random() < 0.5:
            return "HRKU-AA" + self.pick(B64URL, 58)
        return self.uuid()

    def cloudflare_token(self) -> str:
        return self.pick(ALNUM + "_-", 40)

    def vault_token(self) -> str:
        return "hvs.CAESI" + self.pick(B64URL, 86)

    def terraform_token(self) -> str:
        return self.pick(ALNUM, 14) + ".atlasv1." + self.pick(ALNUM, 67)

    def pulumi_token(self) -> str:
        return "pul-" + self.pick(HEX, 40)

    def doppler_token(self) -> str:
        return "dp.st." + self.one(["prd", "dev", "stg"]) + "." + self.pick(ALNUM, 40)

    def databricks_token(self) -> str:
        return "dapi" + self.pick(HEX, 32) + self.one(["", "-2", "-3"])

    def age_secret_key(self) -> str:
        return "AGE-SECRET-KEY-1" + self.pick("QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L".upper(), 58)

    def wireguard_key(self) -> str:
        return b64(self.raw(32))

    # ------------------------------------------------------------ code hosts, registries
    def github_token(self) -> str:
        kind = self.one(["ghp", "ghp", "gho", "ghu", "ghs", "ghr", "pat"])
        if kind == "pat":
            return "github_pat_11" + self.pick(UPPER_DIGITS, 20) + "_" + self.pick(ALNUM, 59)
        return f"{kind}_" + self.pick(ALNUM, 36)

    def gitlab_token(self) -> str:
        prefix = self.one(["glpat-", "glpat-", "glrt-", "gldt-", "glptt-"])
        if prefix == "glptt-":
            return prefix + self.pick(HEX, 40)
        return prefix + self.pick(B64URL, 20)

    def npm_token(self) -> str:
        return "npm_" + self.pick(ALNUM, 36)

    def pypi_token(self) -> str:
        return "pypi-AgEIcHlwaS5vcmc" + self.pick(B64URL, self.num(120, 180))

    def atlassian_token(self) -> str:
        return "ATATT3xFfGF0" + self.pick(B64URL, 170) + "=" + self.pick(HEX.upper(), 8)

    def postman_key(self) -> str:
        return "PMAK-" + self.pick(HEX, 24) + "-" + self.pick(HEX, 34)

    def sentry_token(self) -> str:
        if self.r.random() < 0.5:
            return "sntryu_" + self.pick(HEX, 64)
        return "sntrys_eyJpYXQiOjE3M" + self.pick(B64URL, 140) + "_" + self.pick(B64URL, 43)

    def grafana_token(self) -> str:
        return "glsa_" + self.pick(ALNUM, 32) + "_" + self.pick(HEX, 8)

    def newrelic_key(self) -> str:
        return "NRAK-" + self.pick(UPPER_DIGITS, 27)

    def datadog_key(self, n: int = 32) -> str:
        return self.pick(HEX, n)

    def linear_key(self) -> str:
        return "lin_api_" + self.pick(ALNUM, 40)

    def notion_token(self) -> str:
        if self.r.random() < 0.5:
            return "secret_" + self.pick(ALNUM, 43)
        return "ntn_" + self.pick(DIGITS, 11) + self.pick(ALNUM, 35)

    def figma_token(self) -> str:
        return "figd_" + self.pick(B64URL, 40)

    def airtable_token(self) -> str:
        return "pat" + self.pick(ALNUM, 14) + "." + self.pick(HEX, 64)

    def dropbox_token(self) -> str:
        return "sl.B" + self.pick(B64URL, 135)

    # ------------------------------------------------------------ AI vendors
    def openai_key(self) -> str:
        kind = self.one(["proj", "proj", "svcacct", "admin", "legacy"])
        if kind == "legacy":
            return "sk-" + self.pick(ALNUM, 20) + "T3BlbkFJ" + self.pick(ALNUM, 20)
        return f"sk-{kind}-" + self.pick(B64URL, 74) + "T3BlbkFJ" + self.pick(B64URL, 74)

    def anthropic_key(self) -> str:
        prefix = self.one(["sk-ant-api03-", "sk-ant-api03-", "sk-ant-admin01-"])
        return prefix + self.pick(B64URL, 93) + "AA"

    def huggingface_token(self) -> str:
        return "hf_" + self.pick(string.ascii_letters, 34)

    def llm_key(self) -> tuple[str, str]:
        """(env name, key) of a smaller AI vendor, in its format."""
        vendor = self.one(["groq", "xai", "replicate", "perplexity", "langsmith", "pinecone"])
        if vendor == "groq":
            return "GROQ_API_KEY", "gsk_" + self.pick(ALNUM, 52)
        if vendor == "xai":
            return "XAI_API_KEY", "xai-" + self.pick(ALNUM, 80)
        if vendor == "replicate":
            return "REPLICATE_API_TOKEN", "r8_" + self.pick(ALNUM, 37)
        if vendor == "perplexity":
            return "PERPLEXITY_API_KEY", "pplx-" + self.pick(ALNUM, 48)
        if vendor == "langsmith":
            return "LANGSMITH_API_KEY", "lsv2_pt_" + self.pick(HEX, 32) + "_" + self.pick(HEX, 10)
        return "PINECONE_API_KEY", "pcsk_" + self.pick(ALNUM, 5) + "_" + self.pick(ALNUM, 63)

    # ------------------------------------------------------------ messaging, payments
    def slack_token(self) -> str:
        kind = self.one(["xoxb", "xoxb", "xoxp", "xapp"])
        if kind == "xoxb":
            return f"xoxb-{self.pick(DIGITS, 12)}-{self.pick(DIGITS, 13)}-{self.pick(ALNUM, 24)}"
        if kind == "xoxp":
            ids = "-".join(self.pick(DIGITS, n) for n in (12, 12, 13))
            return f"xoxp-{ids}-{self.pick(HEX, 32)}"
        return f"xapp-1-A{self.pick(UPPER_DIGITS, 10)}-{self.pick(DIGITS, 13)}-{self.pick(HEX, 64)}"

    def slack_webhook(self) -> str:
        return (
            f"https://hooks.slack.com/services/T{self.pick(UPPER_DIGITS, 8)}"
            f"/B{self.pick(UPPER_DIGITS, 10)}/{self.pick(ALNUM, 24)}"
        )

    def webhook_url(self) -> str:
        kind = self.one(["discord", "teams", "zapier", "gchat"])
        if kind == "discord":
            return f"https://discord.com/api/webhooks/{self.pick(DIGITS, 19)}/" + self.pick(
                B64URL, 68
            )
        if kind == "teams":
            return (
                f"https://{self.one(['contoso', 'fabrikam'])}.webhook.office.com/webhookb2/"
                f"{self.uuid()}@{self.uuid()}/IncomingWebhook/{self.pick(HEX, 32)}/{self.uuid()}"
            )
        if kind == "zapier":
            catch = f"{self.pick(DIGITS, 7)}/{self.pick(LOWER_DIGITS, 6)}"
            return f"https://hooks.zapier.com/hooks/catch/{catch}/"
        return (
            f"https://chat.googleapis.com/v1/spaces/AAAA{self.pick(B64URL, 7)}/messages"
            f"?key={self.google_api_key()}&token={self.pick(B64URL, 43)}%3D"
        )

    def discord_bot_token(self) -> str:
        user_id = str(self.num(10**17, 10**18 * 2))
        head = base64.b64encode(user_id.encode()).decode().rstrip("=")
        return f"{head}.{self.pick(B64URL, 6)}.{self.pick(B64URL, 38)}"

    def telegram_bot_token(self) -> str:
        return f"{self.num(10**9, 8 * 10**9)}:AA{self.pick(B64URL, 33)}"

    def twilio_auth_token(self) -> str:
        return self.pick(HEX, 32)

    def sendgrid_key(self) -> str:
        return "SG." + self.pick(B64URL, 22) + "." + self.pick(B64URL, 43)

    def mailgun_key(self) -> str:
        if self.r.random() < 0.5:
            return "key-" + self.pick(HEX, 32)
        return f"{self.pick(HEX, 32)}-{self.pick(HEX, 8)}-{self.pick(HEX, 8)}"

    def mailchimp_key(self) -> str:
        return self.pick(HEX, 32) + f"-us{self.num(1, 21)}"

    def stripe_key(self) -> str:
        prefix = self.one(["sk_live_", "sk_live_", "rk_live_", "sk_test_"])
        return prefix + "51" + self.pick(ALNUM, self.r.choice([22, 97]))

    def stripe_webhook_secret(self) -> str:
        return "whsec_" + self.pick(ALNUM, 32)

    def square_token(self) -> str:
        if self.r.random() < 0.5:
            return "EAAA" + self.pick(B64URL, 60)
        return "sq0csp-" + self.pick(B64URL, 43)

    def braintree_token(self) -> str:
        return f"access_token$production${self.pick(LOWER_DIGITS, 16)}${self.pick(HEX, 32)}"

    def shopify_token(self) -> str:
        return self.one(["shpat_", "shpat_", "shpss_", "shpca_"]) + self.pick(HEX, 32)

    def facebook_token(self) -> str:
        return "EAA" + self.pick(ALNUM, 4) + "ZC" + self.pick(ALNUM, self.num(150, 190))

    def twitter_bearer(self) -> str:
        return "AAAAAAAAAAAAAAAAAAAAA" + self.pick(ALNUM, 30) + "%3D" + self.pick(ALNUM, 50)

    def fcm_server_key(self) -> str:
        return f"AAAA{self.pick(ALNUM, 7)}:APA91b{self.pick(B64URL, 134)}"

    # ------------------------------------------------------------ generic
    def jwt(self, long_sig: bool = False) -> str:
        alg = "RS256" if long_sig else self.one(["HS256", "HS512"])
        header = b64url({"alg": alg, "typ": "JWT"})
        payload = b64url(
            {
                "sub": self.one(["user_", "svc_", "acct_"]) + self.pick(DIGITS, 6),
                "role": self.one(["authenticated", "service_role", "admin", "reader"]),
                "iat": 1_720_000_000 + self.r.randrange(10**7),
                "exp": 1_730_000_000 + self.r.randrange(10**7),
            }
        )
        return f"{header}.{payload}.{self.pick(B64URL, 342 if long_sig else 43)}"

    def private_key(self, label: str | None = None, escaped: bool = False) -> str:
        label = label or self.one(
            ["RSA PRIVATE KEY", "PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY"]
        )
        lead = {
            "RSA PRIVATE KEY": "MIIEpAIBAAKCAQEA",
            "PRIVATE KEY": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ",
            "OPENSSH PRIVATE KEY": "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAA",
            "EC PRIVATE KEY": "MHcCAQEEI",
            "ENCRYPTED PRIVATE KEY": "MIIFHzBJBgkqhkiG9w0BBQ0wPDAbBgkqhkiG9w0BBQwwDgQI",
            "DSA PRIVATE KEY": "MIIBuwIBAAKBgQ",
        }.get(label, "")
        body = lead + b64(self.raw(48 * self.num(4, 9)))
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        sep = "\\n" if escaped else "\n"
        end = f"-----END {label}-----"
        return f"-----BEGIN {label}-----{sep}" + sep.join(lines) + f"{sep}{end}"

    def password(self, symbols: str = "!#%^*@$") -> str:
        style = self.r.randrange(6)
        words = ["Harbor", "violet", "Quartz", "otter", "Cobalt", "lantern", "Meadow", "prism"]
        if style == 0:
            return self.one(words) + str(self.num(1985, 2025)) + self.r.choice(symbols)
        if style == 1:
            return self.pick(ALNUM + symbols, self.num(12, 22))
        if style == 2:
            return "-".join(self.one(words).lower() for _ in range(4))
        if style == 3:
            return self.one(words) + self.r.choice(symbols) + self.pick(ALNUM, 7)
        if style == 4:
            return self.pick(ALNUM, self.num(16, 32))
        return self.one(["P", "Qw", "Zx"]) + self.pick(ALNUM, 5) + self.r.choice(symbols) + "9"

    def app_password(self) -> str:
        return " ".join(self.pick(LOWER, 4) for _ in range(4))

    def hex_secret(self, n: int = 64) -> str:
        return self.pick(HEX, n)

    def b64_secret(self, n: int = 32) -> str:
        return b64(self.raw(n))

    def fernet_key(self) -> str:
        return base64.urlsafe_b64encode(self.raw(32)).decode()

    def opaque_token(self) -> str:
        return self.pick(ALNUM, self.num(32, 48))

    def basic_auth(self, user: str) -> str:
        return b64(f"{user}:{self.password()}".encode())

    def session_cookie(self) -> tuple[str, str]:
        """(cookie name, value) of a web framework's session cookie."""
        kind = self.one(["django", "express", "php", "java", "rails", "laravel"])
        if kind == "django":
            return "sessionid", self.pick(LOWER_DIGITS, 32)
        if kind == "express":
            return "connect.sid", f"s%3A{self.pick(B64URL, 32)}.{self.pick(B64URL, 43)}"
        if kind == "php":
            return "PHPSESSID", self.pick("abcdefghijklmnopqrstuv0123456789", 26)
        if kind == "java":
            return "JSESSIONID", self.pick(HEX.upper(), 32)
        if kind == "rails":
            return "_shop_session", f"{self.pick(B64, 120)}--{self.pick(B64, 24)}%3D%3D"
        iv = b64(json.dumps({"iv": b64(self.raw(16))}).encode())[:-2]
        return "laravel_session", iv + self.pick(ALNUM, 140) + "%3D"

    # ------------------------------------------------------------ lookalikes
    def git_sha(self) -> str:
        return self.pick(HEX, 40)

    def sha256(self) -> str:
        return self.pick(HEX, 64)

    def md5(self) -> str:
        return self.pick(HEX, 32)

    def uuid(self) -> str:
        h = self.pick(HEX, 32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{self.one(['8', '9', 'a', 'b'])}{h[17:20]}-{h[20:]}"

    def trace_id(self) -> str:
        return self.pick(HEX, 32)

    def integrity(self) -> str:
        return "sha512-" + b64(self.raw(64))

    def go_sum(self) -> str:
        return "h1:" + b64(self.raw(32))

    def version(self) -> str:
        a, b, c = self.num(0, 9), self.num(0, 40), self.num(0, 30)
        return self.one([f"{a}.{b}.{c}", f"{a}.{b}.{c}", f"{a}.{b}.{c}-beta.{c % 5}"])

    def date(self) -> str:
        return f"2024-{self.num(1, 12):02d}-{self.num(1, 28):02d}"

    def ts(self) -> str:
        return f"{self.date()}T{self.num(0, 23):02d}:{self.num(0, 59):02d}:{self.num(0, 59):02d}Z"

    def account_id(self) -> str:
        return self.pick(DIGITS, 12)

    def memory_address(self) -> str:
        return "0x7f" + self.pick(HEX, 10)

    def base64_fixture(self) -> str:
        plain = self.one(
            [
                '{"id": 7, "name": "widget", "tags": ["red", "small"]}',
                "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
                "name,qty,price\nbolt,10,0.25\nnut,40,0.05\n",
                '{"type":"ping","seq":1201,"payload":"keepalive"}',
            ]
        )
        return b64(plain.encode())

    def ssh_public_key(self) -> str:
        if self.r.random() < 0.5:
            return "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + b64(self.raw(32))[:43]
        return "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQ" + b64(self.raw(360)).rstrip("=")

    def public_key_pem(self, label: str = "PUBLIC KEY") -> str:
        lead = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA" if label == "PUBLIC KEY" else "MIID"
        body = lead + b64(self.raw(48 * self.num(4, 7)))
        lines = [body[i : i + 64] for i in range(0, len(body), 64)]
        return f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----"


def holdout3_items(rounds: int = ROUNDS) -> list[dict[str, Any]]:
    """Every template drawn ``rounds`` times, each draw from its own seeded generator."""
    from secrets_holdout3_code import CODE_TEMPLATES
    from secrets_holdout3_code2 import CODE2_TEMPLATES
    from secrets_holdout3_config import CONFIG_TEMPLATES
    from secrets_holdout3_config2 import CONFIG2_TEMPLATES
    from secrets_holdout3_ops import OPS_TEMPLATES
    from secrets_holdout3_ops2 import OPS2_TEMPLATES

    templates = [
        *CODE_TEMPLATES,
        *CODE2_TEMPLATES,
        *CONFIG_TEMPLATES,
        *CONFIG2_TEMPLATES,
        *OPS_TEMPLATES,
        *OPS2_TEMPLATES,
    ]
    items: list[dict[str, Any]] = []
    for source, template in templates:
        for round_ in range(rounds):
            fake = Fake3(random.Random(f"{SEED}:{source}:{template.__name__}:{round_}"))
            text = ""
            secrets: list[dict[str, Any]] = []
            lookalikes: list[dict[str, Any]] = []
            for part in template(fake):
                if isinstance(part, str):
                    text += part
                    continue
                role, kind, value = part
                span = {"start": len(text), "end": len(text) + len(value), "kind": kind}
                (secrets if role == "s" else lookalikes).append(span)
                text += value
            items.append(
                {
                    "id": f"holdout3-{len(items):03d}",
                    "source": source,
                    "text": text,
                    "secrets": secrets,
                    "lookalikes": lookalikes,
                }
            )
    return items
