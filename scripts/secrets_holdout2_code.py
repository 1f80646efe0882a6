"""The second held-out set, part two: code, shell sessions, logs and pasted requests with
secrets in them, and files full of lookalikes that must survive (lock files, placeholders,
fixtures, Dockerfiles, SSH public keys). Every value is random (seeded) and fake."""

from __future__ import annotations

import string
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_fakes import ALNUM, B64, B64URL, HEX, LOWER_DIGITS, UPPER_DIGITS, Fake, Snippet
from secrets_holdout2_config import (
    azure_client_secret,
    generic_value,
    password,
    random_bytes_b64,
    shell_password,
    vendor_token,
)


def docker_cli(b: Snippet, f: Fake) -> None:
    b.t("$ docker run -d --name pg -e POSTGRES_PASSWORD=")
    b.s("password", shell_password(f))
    b.t(" -p 5432:5432 postgres:16@sha256:")
    b.n("sha256", f.sha256())
    b.t("\n$ docker login -u ci-bot -p ")
    b.s("password", shell_password(f))
    b.t(" registry.acme-corp.io\nWARNING! Using --password via the CLI is insecure.\n")


def secret_cli(b: Snippet, f: Fake) -> None:
    b.t('$ gh secret set SLACK_BOT_TOKEN --body "')
    b.s("slack_token", f.slack_token())
    b.t('"\n$ heroku config:set SENDGRID_API_KEY=')
    b.s("sendgrid_key", f.sendgrid_key())
    b.t(" -a acme-api\n$ vault kv put secret/billing db_password=")
    b.s("password", shell_password(f))
    b.t("\n$ fly secrets set SESSION_SECRET=")
    b.s("generic_secret", f.pick(HEX, 64))
    b.t("\n$ gh run view ")
    b.n("run_id", f.pick(string.digits, 10))
    b.t(" --log-failed\n")


def database_cli(b: Snippet, f: Fake) -> None:
    b.t('$ psql "host=db.internal port=5432 dbname=shop user=app password=')
    b.s("password", shell_password(f))
    b.t(' sslmode=require"\n$ redis-cli -h cache.internal -a ')
    b.s("password", shell_password(f))
    b.t(' --no-auth-warning ping\n$ mongosh "mongodb+srv://admin:')
    b.s("password_in_url", f.url_password())
    b.t("@cluster0.")
    b.t(f.pick(LOWER_DIGITS, 5))
    b.t('.mongodb.net/?retryWrites=true"\n$ pg_dump --version\npg_dump (PostgreSQL) ')
    b.n("version", f"16.{f.r.randrange(1, 9)}")
    b.t("\n")


def azure_cli(b: Snippet, f: Fake) -> None:
    b.t("$ az login --service-principal -u ")
    b.n("uuid", f.uuid())
    b.t(" -p ")
    b.s("azure_client_secret", azure_client_secret(f))
    b.t(" --tenant ")
    b.n("uuid", f.uuid())
    b.t("\n$ az account show --query id -o tsv\n")
    b.n("uuid", f.uuid())
    b.t("\n")


def vendor_cli(b: Snippet, f: Fake) -> None:
    b.t('$ curl -H "X-Shopify-Access-Token: ')
    b.s("shopify_token", "shpat_" + f.pick(HEX, 32))
    b.t('" https://acme.myshopify.com/admin/api/2024-01/shop.json\n$ doctl auth init -t ')
    b.s("digitalocean_token", "dop_v1_" + f.pick(HEX, 64))
    b.t('\n$ curl --header "PRIVATE-TOKEN: ')
    b.s("gitlab_token", f.gitlab_token())
    b.t('" https://gitlab.com/api/v4/projects\n< X-Request-Id: ')
    b.n("uuid", f.uuid())
    b.t("\n")


def git_credentials(b: Snippet, f: Fake) -> None:
    b.t("$ cat ~/.git-credentials\nhttps://maria:")
    b.s("github_token", f.github_token())
    b.t("@github.com\n$ git clone https://oauth2:")
    b.s("gitlab_token", f.gitlab_token())
    b.t("@gitlab.com/acme/api.git\n$ huggingface-cli login --token ")
    b.s("huggingface_token", f.huggingface_token())
    b.t("\n$ git log -1 --format=%H\n")
    b.n("git_sha", f.git_sha())
    b.t("\n")


def python_sdks(b: Snippet, f: Fake) -> None:
    b.t('s3 = boto3.client(\n    "s3",\n    aws_access_key_id="')
    b.s("aws_access_key", f.aws_access_key())
    b.t('",\n    aws_secret_access_key="')
    b.s("aws_secret", f.aws_secret())
    b.t('",\n)\nslack = WebClient(token="')
    b.s("slack_token", f.slack_token())
    b.t('")\nSECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "')
    b.s("generic_secret", f.pick(ALNUM + "!@#$%^&*(-_=+)", 50))
    b.t('")\nDATABASES["default"]["PASSWORD"] = os.getenv("DB_PASSWORD", "')
    b.s("password", password(f))
    b.t('")\nSTATIC_VERSION = "')
    b.n("short_sha", f.short_sha())
    b.t('"\n')


def js_and_go(b: Snippet, f: Fake) -> None:
    b.t('const firebaseConfig = {\n  apiKey: "')
    b.s("google_api_key", f.google_api_key())
    b.t('",\n  projectId: "acme-prod",\n  appId: "1:')
    b.n("app_id", f.pick(string.digits, 12) + ":web:" + f.pick(HEX, 22))
    b.t("\",\n};\nconst jwtSecret = process.env.JWT_SECRET ?? '")
    b.s("generic_secret", f.pick(B64URL, 43))
    b.t("';\n\n// main.go\nvar hmacKey = []byte(\"")
    b.s("generic_secret", f.pick(ALNUM, 32))
    b.t('")\ndb, err := sql.Open("pgx", "postgres://billing:')
    b.s("password_in_url", f.url_password())
    b.t('@db.internal:5432/billing")\n// require github.com/jackc/pgx/v5 ')
    b.n("version", f"v5.{f.r.randrange(9)}.{f.r.randrange(9)}")
    b.t("\n")


def jvm_and_dotnet(b: Snippet, f: Fake) -> None:
    b.t('public final class PaymentsConfig {\n    private static final String CLIENT_SECRET = "')
    b.s("generic_secret", f.pick(B64URL, 40))
    b.t('";\n    @Value("')
    b.n("env_reference", "${payments.webhook.secret}")
    b.t(
        '")\n    private String webhookSecret;\n}\n// Program.cs\nvar client = new SendGridClient("'
    )
    b.s("sendgrid_key", f.sendgrid_key())
    b.t('");\nvar conn = "Driver={ODBC Driver 18 for SQL Server};Server=sql.acme.internal;')
    b.t("Uid=sa;Pwd=")
    b.s("password", password(f).replace(";", ""))
    b.t(";\";\n# config/initializers/stripe.rb\nStripe.api_key = '")
    b.s("stripe_key", f.stripe_key())
    b.t("'\n")


def vscode_launch(b: Snippet, f: Fake) -> None:
    b.t('{\n  "version": "0.2.0",\n  "configurations": [{\n    "type": "debugpy",\n')
    b.t('    "env": {\n      "ANTHROPIC_API_KEY": "')
    b.s("anthropic_key", f.anthropic_key())
    b.t('",\n      "OPENAI_API_KEY": "')
    b.s("openai_key", f.openai_key())
    b.t('",\n      "RUN_ID": "')
    b.n("uuid", f.uuid())
    b.t('"\n    }\n  }]\n}\n')


def app_logs(b: Snippet, f: Fake) -> None:
    b.t("2024-05-01T12:00:03.114Z DEBUG http.client: POST /v1/charges headers=")
    b.t("{'Authorization': 'Bearer ")
    b.s("bearer_token", f.bearer_token())
    b.t("', 'Idempotency-Key': '")
    b.n("uuid", f.uuid())
    b.t("'}\n2024-05-01T12:00:03.201Z INFO  amqp: connected to amqp://orders:")
    b.s("password_in_url", f.url_password())
    b.t("@rabbitmq:5672/%2F\n2024-05-01T12:00:04.000Z DEBUG cache: stored blob sha1=")
    b.n("sha1", f.pick(HEX, 40))
    b.t("\n2024-05-01T12:00:04.310Z ERROR auth: rejected token=")
    b.s("generic_secret", f.pick(ALNUM, 32))
    b.t(" for tenant ")
    b.n("uuid", f.uuid())
    b.t("\n")


def copy_as_curl(b: Snippet, f: Fake) -> None:
    b.t("curl 'https://app.acme-corp.io/api/v2/projects?page=2' \\\n")
    b.t("  -H 'accept: application/json' \\\n  -H 'cookie: _ga=GA1.1.")
    b.n("analytics_id", f.pick(string.digits, 9) + "." + f.pick(string.digits, 10))
    b.t("; session_id=")
    b.s("session_cookie", f.pick(B64URL, 43))
    b.t("' \\\n  -H 'authorization: Token ")
    b.s("generic_secret", f.pick(HEX, 40))
    b.t("' \\\n  -H 'if-none-match: W/\"")
    b.n("etag", f.pick(HEX, 32))
    b.t("\"' \\\n  --compressed\n")


def webhook_and_vendors(b: Snippet, f: Fake) -> None:
    b.t('GITHUB_WEBHOOK_SECRET = "')
    b.s("generic_secret", f.pick(HEX, 40))
    b.t('"\n# the request the handler rejects:\nX-GitHub-Delivery: ')
    b.n("uuid", f.uuid())
    b.t("\nX-Hub-Signature-256: sha256=")
    b.n("signature", f.sha256())
    b.t("\n")
    name, kind, value = vendor_token(f)
    b.line(f"client = Client(api_key=os.getenv('{name}', '", True, kind, value, "'))\n")


def ssh_keys(b: Snippet, f: Fake) -> None:
    b.t("$ cat ~/.ssh/id_ed25519.pub\nssh-ed25519 ")
    b.n("public_key", "AAAAC3NzaC1lZDI1NTE5AAAAI" + f.pick(B64, 43))
    b.t(" maria@laptop\n$ ssh-keygen -lf ~/.ssh/id_ed25519\n256 SHA256:")
    b.n("fingerprint", f.pick(B64, 43))
    b.t(" maria@laptop (ED25519)\n$ cat ~/.ssh/id_ed25519\n")
    body = random_bytes_b64(f, 300)
    lines = [body[i : i + 70] for i in range(0, len(body), 70)]
    block = "-----BEGIN OPENSSH PRIVATE KEY-----\n" + "\n".join(lines)
    b.s("private_key_pem", block + "\n-----END OPENSSH PRIVATE KEY-----")
    b.t("\nPermissions 0644 for '/home/maria/.ssh/id_ed25519' are too open.\n")


def package_managers(b: Snippet, f: Fake) -> None:
    b.t('# .yarnrc.yml\nnpmScopes:\n  acme:\n    npmAuthToken: "')
    b.s("npm_token", f.npm_token())
    b.t('"\n# yarn.lock\n"left-pad@npm:^1.3.0":\n  version: 1.3.0\n  checksum: ')
    b.n("checksum", f.pick(HEX, 128))
    b.t("\n$ poetry config pypi-token.pypi ")
    b.s("pypi_token", f.pypi_token())
    b.t("\n$ poetry config http-basic.acme ci ")
    b.s("password", shell_password(f))
    b.t('\n# poetry.lock\n    {file = "attrs-23.2.0-py3-none-any.whl", hash = "sha256:')
    b.n("sha256", f.sha256())
    b.t('"},\n# nix.conf\naccess-tokens = github.com=')
    b.s("github_token", f.github_token())
    b.t("\n")


def lock_files(b: Snippet, f: Fake) -> None:
    b.t('{\n  "name": "@acme/ui",\n  "version": "')
    b.n("version", f.version())
    b.t('",\n  "gitHead": "')
    b.n("git_sha", f.git_sha())
    b.t('",\n  "dist": {\n    "integrity": "')
    b.n("integrity_hash", f.integrity())
    b.t('",\n    "shasum": "')
    b.n("sha1", f.pick(HEX, 40))
    b.t('"\n  }\n}\n# flake.lock\n"narHash": "sha256-')
    b.n("nix_hash", random_bytes_b64(f))
    b.t('",\n"rev": "')
    b.n("git_sha", f.git_sha())
    b.t('"\n')


def placeholders(b: Snippet, f: Fake) -> None:
    options = [
        ("API_KEY=", "<your-api-key>"),
        ("password: ", "changeme"),
        ('token: "', "TODO"),
        ("SECRET_KEY=", "replace-with-a-long-random-string"),
        ("AWS_ACCESS_KEY_ID=", "AKIAIOSFODNN7EXAMPLE"),
        ("aws_secret_access_key = ", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
        ("OPENAI_API_KEY=", "sk-your-key-here"),
        ('"password": "', "********"),
        ("token=", "<redacted>"),
        ("secret: ", "${{ secrets.DEPLOY_KEY }}"),
        ('"db_password": "', "{{ vault_db_password }}"),
        ("SLACK_TOKEN=", "xoxb-000000000000-0000000000000-" + "X" * 24),
        ("STRIPE_SECRET_KEY=", "sk_live_" + "x" * 24),
        ("DB_PASSWORD=", "$DB_PASSWORD"),
        ("client_secret: ", "<client-secret>"),
        ("JWT_SECRET=", "your_jwt_secret"),
    ]
    b.t("## Configuration\n\nCopy `.env.example` to `.env` and set:\n\n")
    for before, value in f.r.sample(options, 5):
        b.line(before, False, "placeholder", value, '"\n' if before.endswith('"') else "\n")


def test_fixtures(b: Snippet, f: Fake) -> None:
    b.t("MAX_PASSWORD_LENGTH = ")
    b.n("setting_value", f.one(["64", "128", "256"]))
    b.t("\nTOKEN_TTL_SECONDS = ")
    b.n("setting_value", str(f.r.randrange(300, 86400)))
    b.t("\n\ndef test_decode():\n    assert b64decode('")
    b.n("base64_fixture", f.base64_fixture())
    b.t("')\n    assert digest(b'abc') == '")
    b.n("sha256", f.sha256())
    b.t("'\n    assert parse_id('")
    b.n("uuid", f.uuid())
    b.t("').version == 4\n    assert cache_key(user) == '")
    b.n("md5", f.md5())
    b.t("'\n")


def dockerfile(b: Snippet, f: Fake) -> None:
    b.t("FROM python:")
    b.n("version", f"3.12.{f.r.randrange(1, 9)}")
    b.t("-slim@sha256:")
    b.n("sha256", f.sha256())
    b.t("\nARG NODE_VERSION=")
    b.n("version", f"20.{f.r.randrange(9, 18)}.{f.r.randrange(9)}")
    b.t("\nLABEL org.opencontainers.image.revision=")
    b.n("git_sha", f.git_sha())
    b.t("\nRUN --mount=type=secret,id=")
    b.n("secret_name", "npm_token")
    b.t(" npm ci\nENV API_SECRET=")
    b.s("generic_secret", generic_value(f))
    b.t("\nENV BUILD_NUMBER=")
    b.n("build_id", f.pick(UPPER_DIGITS, 10))
    b.t("\n")


CODE_TEMPLATES = (
    docker_cli,
    secret_cli,
    database_cli,
    azure_cli,
    vendor_cli,
    git_credentials,
    python_sdks,
    js_and_go,
    jvm_and_dotnet,
    vscode_launch,
    app_logs,
    copy_as_curl,
    webhook_and_vendors,
    ssh_keys,
    package_managers,
    lock_files,
    placeholders,
    test_fixtures,
    dockerfile,
)
