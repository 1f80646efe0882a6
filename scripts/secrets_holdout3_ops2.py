"""Held-out set 3, operations, part 2: tool exports, CI logs, chat pastes, database
and worker output, SSH/GPG/TLS key files, web.config (see secrets_holdout3.py)."""

from __future__ import annotations

from secrets_holdout3 import (
    ALNUM,
    B64,
    B64URL,
    HEX,
    LOWER_DIGITS,
    Fake3,
    N,
    Part,
    S,
    Template,
)


def postman_export(f: Fake3) -> list[Part]:
    return [
        '{\n  "info": {"_postman_id": "',
        N("uuid", f.uuid()),
        '", "name": "Billing API"},\n  "auth": {"type": "apikey", "apikey": [\n'
        '    {"key": "value", "value": "',
        S("generic_secret", f.pick(ALNUM, 32)),
        '"},\n    {"key": "key", "value": "',
        N("secret_name", "X-Api-Key"),
        '"}\n  ]},\n  "variable": [{"key": "postman_api_key", "value": "',
        S("postman_key", f.postman_key()),
        '"}]\n}\n',
    ]


def atlassian_curl(f: Fake3) -> list[Part]:
    return [
        "curl -u ",
        S("email", "wei.okafor@initech.co"),
        ":",
        S("atlassian_token", f.atlassian_token()),
        " \\\n  -H 'Accept: application/json' \\\n  'https://initech.atlassian.net/rest/api/3/issue/",
        N("ticket_number", f"OPS-{f.num(10, 9999)}"),
        "'\n",
    ]


def jenkins_log(f: Fake3) -> list[Part]:
    return [
        "[Pipeline] withCredentials\nMasking supported pattern matches of $REGISTRY_PASSWORD\n"
        "[Pipeline] sh\n+ docker login -u ci -p ",
        N("masked_secret", "****"),
        " registry.acme.dev\n+ curl -X POST -H 'Content-type: application/json' --data @msg.json ",
        S("slack_webhook", f.slack_webhook()),
        "\n+ echo build ",
        N("numeric_id", str(f.num(100, 9999))),
        " at ",
        N("git_sha", f.git_sha()),
        "\n",
    ]


def chat_paste(f: Fake3) -> list[Part]:
    return [
        "hey, alerts stopped posting. this is what's in the bot config:\n\nalerts_webhook: ",
        S("webhook_url", f.webhook_url()),
        "\nzap_hook: ",
        S("webhook_url", f.webhook_url()),
        "\nchannel: '#",
        N("long_identifier", "ops-alerts-" + f.one(["prod", "eu", "payments"])),
        "'\n",
    ]


def psql_session(f: Fake3) -> list[Part]:
    return [
        "orders=> SELECT id, key_prefix, key_hash, token FROM api_keys LIMIT 2;\n"
        " id | key_prefix |                            "
        " key_hash                             | token\n"
        "----+------------+------------------------------------------------------------------+------\n"
        "  1 | ",
        N("masked_secret", "ak_" + f.pick(LOWER_DIGITS, 6)),
        "  | ",
        N("sha256", f.sha256()),
        " | ",
        S("generic_secret", "ak_" + f.pick(ALNUM, 32)),
        "\n  2 | ",
        N("masked_secret", "ak_" + f.pick(LOWER_DIGITS, 6)),
        "  | ",
        N("sha256", f.sha256()),
        " | \n(2 rows)\n",
    ]


def celery_log(f: Fake3) -> list[Part]:
    return [
        "[",
        N("date", f.ts()),
        ": INFO/MainProcess] Connected to amqp://guest:",
        N("masked_secret", "**"),
        "@rabbit:5672//\n[ERROR/MainProcess] consumer: Cannot connect to redis://default:",
        S("password_in_url", f.pick(ALNUM, 22)),
        "@cache.internal:6379/1: Error 111 connecting. Connection refused.\n"
        "Trying again in 4.00 seconds... (task id ",
        N("uuid", f.uuid()),
        ")\n",
    ]


def sentry_event(f: Fake3) -> list[Part]:
    name, value = f.session_cookie()
    return [
        '{\n  "event_id": "',
        N("trace_id", f.trace_id()),
        '",\n  "request": {\n    "url": "https://shop.acme.dev/checkout",\n    "headers": {\n'
        '      "Authorization": "',
        N("masked_secret", "[Filtered]"),
        '",\n      "Cookie": "',
        name,
        "=",
        S("session_cookie", value),
        '"\n    }\n  },\n  "release": "shop@',
        N("version", f.version()),
        '"\n}\n',
    ]


def saas_curl(f: Fake3) -> list[Part]:
    return [
        'curl "https://api.airtable.com/v0/app',
        N("resource_id", f.pick(ALNUM, 14)),
        '/Orders" -H "Authorization: Bearer ',
        S("airtable_token", f.airtable_token()),
        '"\ncurl -H "X-Figma-Token: ',
        S("figma_token", f.figma_token()),
        '" "https://api.figma.com/v1/files/',
        N("resource_id", f.pick(ALNUM, 22)),
        '"\ncurl -X POST https://content.dropboxapi.com/2/files/download --header "Authorization: '
        "Bearer ",
        S("dropbox_token", f.dropbox_token()),
        '"\n',
    ]


def payments_cli(f: Fake3) -> list[Part]:
    return [
        "$ cat ~/.config/payments/credentials\n[square]\naccess_token = ",
        S("square_token", f.square_token()),
        "\napplication_id = sq0idp-",
        N("client_id", f.pick(B64URL, 22)),
        "\n[braintree]\naccess_token = ",
        S("braintree_token", f.braintree_token()),
        "\nmerchant_id = ",
        N("account_id", f.pick(LOWER_DIGITS, 16)),
        "\n",
    ]


def databricks_cfg(f: Fake3) -> list[Part]:
    return [
        "$ cat ~/.databrickscfg\n[DEFAULT]\nhost  = https://adb-",
        N("numeric_id", f.pick("0123456789", 16)),
        ".7.azuredatabricks.net\ntoken = ",
        S("databricks_token", f.databricks_token()),
        "\ncluster_id = ",
        N(
            "resource_id",
            f"{f.pick('0123456789', 4)}-{f.pick('0123456789', 6)}-{f.pick(LOWER_DIGITS, 8)}",
        ),
        "\n",
    ]


def ssh_keys(f: Fake3) -> list[Part]:
    return [
        "$ cat ~/.ssh/id_ed25519\n",
        S("private_key_pem", f.private_key("OPENSSH PRIVATE KEY")),
        "\n$ cat ~/.ssh/id_ed25519.pub\n",
        N("public_key", f.ssh_public_key()),
        " dev@laptop\n$ ssh-keygen -lf ~/.ssh/id_ed25519.pub\n256 SHA256:",
        N("key_fingerprint", f.b64_secret(32).rstrip("=")),
        " dev@laptop (ED25519)\n",
    ]


def gpg_keys(f: Fake3) -> list[Part]:
    body = "\n".join(f.pick(B64, 64) for _ in range(f.num(5, 9)))
    return [
        "$ gpg --list-secret-keys --keyid-format=long\nsec   ed25519/",
        N("key_id", f.pick(HEX.upper(), 16)),
        " 2023-05-02 [SC]\n      ",
        N("key_fingerprint", f.pick(HEX.upper(), 40)),
        "\n$ gpg --export-secret-keys --armor release@acme\n",
        S(
            "private_key_pem",
            "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n"
            + body
            + "\n="
            + f.pick(B64, 4)
            + "\n-----END PGP PRIVATE KEY BLOCK-----",
        ),
        "\n",
    ]


def tls_files(f: Fake3) -> list[Part]:
    return [
        "# nginx/ssl/server.crt\n",
        N("certificate", f.public_key_pem("CERTIFICATE")),
        "\n# nginx/ssl/server.key\n",
        S("private_key_pem", f.private_key(f.one(["ENCRYPTED PRIVATE KEY", "EC PRIVATE KEY"]))),
        "\n# jwt/public.pem\n",
        N("public_key", f.public_key_pem()),
        "\n",
    ]


def web_config(f: Fake3) -> list[Part]:
    return [
        "<configuration>\n  <connectionStrings>\n"
        '    <add name="Erp" connectionString="Data Source=erp01;'
        "Initial Catalog=Erp;User ID=erp_web;Password=",
        S("password", f.password(symbols="!#%^*@$")),
        '" />\n  </connectionStrings>\n  <system.web>\n    <machineKey validationKey="',
        S("generic_secret", f.pick(HEX.upper(), 128)),
        '" decryptionKey="',
        S("generic_secret", f.pick(HEX.upper(), 48)),
        '" validation="HMACSHA256" />\n  </system.web>\n</configuration>\n',
    ]


def api_log_refresh(f: Fake3) -> list[Part]:
    return [
        "2024-06-02 11:04:51,223 DEBUG oauthlib.oauth2.rfc6749.clients.base_client "
        "token refreshed: {'access_token': '",
        S("jwt", f.jwt(long_sig=True)),
        "', 'refresh_token': '",
        S("bearer_token", f.pick(ALNUM, 64)),
        "', 'expires_in': 3600, 'token_type': 'Bearer'}\n2024-06-02 11:04:51,301 INFO "
        "sync.worker job ",
        N("uuid", f.uuid()),
        " finished in 0.31s\n",
    ]


def hex_colours_css(f: Fake3) -> list[Part]:
    return [
        "/* theme.css, build ",
        N("short_sha", f.pick(HEX, 8)),
        " */\n:root {\n  --brand: #",
        N("hex_colour", f.pick(HEX, 6)),
        ";\n  --accent: #",
        N("hex_colour", f.pick(HEX, 6)),
        ";\n}\n.logo { background: url(data:image/png;base64,",
        N("base64_image", "iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAA" + f.pick(B64, 80)),
        "); }\n",
    ]


OPS2_TEMPLATES: list[tuple[str, Template]] = [
    ("postman collection", postman_export),
    ("curl jira", atlassian_curl),
    ("jenkins log", jenkins_log),
    ("chat paste", chat_paste),
    ("psql output", psql_session),
    ("celery log", celery_log),
    ("sentry event", sentry_event),
    ("curl saas", saas_curl),
    ("credentials file", payments_cli),
    (".databrickscfg", databricks_cfg),
    ("ssh keys", ssh_keys),
    ("gpg", gpg_keys),
    ("tls files", tls_files),
    ("web.config", web_config),
    ("oauth debug log", api_log_refresh),
    ("css", hex_colours_css),
]
