"""The tuning corpus's templates, part one: configuration and credential files, shell history,
logs, lock files, client code, pastes (scripts/secrets_corpus.py draws them in this order)."""

from __future__ import annotations

import base64
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_fakes import ALNUM, HEX, LOWER_DIGITS, Fake, Snippet, Template


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


FILE_TEMPLATES: tuple[Template, ...] = (
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
)
