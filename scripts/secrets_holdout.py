"""The held-out templates: written after the scrubber was tuned on the others, and measured once:
phrasings and formats those do not use, to show how far the figures carry beyond the text
they were tuned on (docs/secrets.md)."""

from __future__ import annotations

import base64
import string
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_fakes import ALNUM, B64URL, HEX, Fake, Snippet, Template


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
