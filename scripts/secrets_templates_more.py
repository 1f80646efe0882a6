"""The tuning corpus's templates, part two: chat messages, lock and build files, connection
strings, dumps, traces, tickets, ids and cursors (drawn after part one)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or imported

from secrets_fakes import ALNUM, HEX, Fake, Snippet, Template


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


MORE_TEMPLATES: tuple[Template, ...] = (
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
