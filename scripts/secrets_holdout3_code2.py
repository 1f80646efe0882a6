"""Held-out set 3, source code, part 2: SQL, notebooks, stack traces, more Python,
JavaScript, Go and TypeScript (see secrets_holdout3.py)."""

from __future__ import annotations

from secrets_holdout3 import (
    HEX,
    LOWER_DIGITS,
    UPPER_DIGITS,
    Fake3,
    N,
    Part,
    S,
    Template,
)


def sql_migration(f: Fake3) -> list[Part]:
    return [
        "-- ",
        N("ticket_number", f"DATA-{f.num(100, 9999)}"),
        ": reporting role\nCREATE ROLE reporting LOGIN PASSWORD '",
        S("password", f.password()),
        "';\nGRANT SELECT ON ALL TABLES IN SCHEMA analytics TO reporting;\n\n"
        "INSERT INTO oauth_clients (name, client_id, client_secret, created_at) VALUES\n"
        "  ('billing-svc', '",
        N("uuid", f.uuid()),
        "', '",
        S("generic_secret", f.pick(LOWER_DIGITS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 40)),
        "', '",
        N("date", f.date()),
        "');\n",
    ]


def sql_mysql_users(f: Fake3) -> list[Part]:
    return [
        "CREATE USER 'etl'@'%' IDENTIFIED BY '",
        S("password", f.password()),
        "';\nALTER USER 'root'@'localhost' IDENTIFIED WITH mysql_native_password BY '",
        S("password", f.password()),
        "';\nSELECT user, host, plugin FROM mysql.user WHERE ",
        N("secret_name", "authentication_string"),
        " = '';\n",
    ]


def notebook(f: Fake3) -> list[Part]:
    cell_a, cell_b = f.pick(HEX, 8), f.pick(HEX, 8)
    return [
        '{\n "cells": [\n  {\n   "cell_type": "code",\n   "execution_count": 1,\n   "id": "',
        N("short_sha", cell_a),
        '",\n   "metadata": {},\n   "outputs": [],\n   "source": [\n    "import os\\n",\n'
        '    "os.environ[\\"HF_TOKEN\\"] = \\"',
        S("huggingface_token", f.huggingface_token()),
        '\\"\\n",\n    "os.environ[\\"WANDB_API_KEY\\"] = \\"',
        S("generic_secret", f.hex_secret(40)),
        '\\"\\n"\n   ]\n  },\n  {\n   "cell_type": "code",\n   "execution_count": 2,\n   "id": "',
        N("short_sha", cell_b),
        '",\n   "outputs": [{"name": "stdout", "text": ["model sha ',
        N("git_sha", f.git_sha()),
        '\\n"]}],\n   "source": ["model = AutoModel.from_pretrained(\\"acme/encoder\\")"]\n'
        "  }\n ]\n}\n",
    ]


def py_traceback(f: Fake3) -> list[Part]:
    return [
        'Traceback (most recent call last):\n  File "/srv/app/sync.py", line 88, in run\n'
        '    resp.raise_for_status()\n  File "/srv/app/.venv/lib/python3.12/site-packages/'
        'requests/models.py", line 1021, in raise_for_status\n    raise HTTPError(http_error_msg, '
        "response=self)\nrequests.exceptions.HTTPError: 403 Client Error: Forbidden for url: "
        "https://api.weather-feed.io/v1/forecast?lat=52.5&api_key=",
        S("generic_secret", f.pick(HEX, 32)),
        "\n\nDuring handling, <Session object at ",
        N("memory_address", f.memory_address()),
        "> was closed\n",
    ]


def java_trace(f: Fake3) -> list[Part]:
    return [
        'org.postgresql.util.PSQLException: FATAL: password authentication failed for user "app"\n'
        "  url=jdbc:postgresql://pg-replica:5432/orders?user=app&password=",
        S("password", f.pick(LOWER_DIGITS + "ABCDEFGHJKMNPQRSTUVWXYZ", 20)),
        "&ssl=true\n\tat org.postgresql.core.v3.ConnectionFactoryImpl.doAuthentication("
        "ConnectionFactoryImpl.java:693)\n\tat com.zaxxer.hikari.pool.HikariPool.createPoolEntry("
        "HikariPool.java:477)\n\tat com.acme.orders.",
        N("long_identifier", "OrderReconciliationScheduledJobConfiguration"),
        ".run(OrderReconciliationScheduledJobConfiguration.java:51)\nHikariProxyConnection@",
        N("memory_address", f.pick(HEX, 8)),
        "\n",
    ]


def js_express_session(f: Fake3) -> list[Part]:
    return [
        "const session = require('express-session');\nconst jwt = require('jsonwebtoken');\n\n"
        "app.use(session({\n  secret: '",
        S("generic_secret", f.pick(LOWER_DIGITS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 36)),
        "',\n  resave: false,\n  cookie: { maxAge: 86400000 },\n}));\n\n"
        "const token = jwt.sign({ uid: user.id }, '",
        S("generic_secret", f.one(["acme", "shop", "ride"]) + "-jwt-" + f.pick(LOWER_DIGITS, 20)),
        "', { expiresIn: '1h' });\nconst nonce = crypto.randomBytes(16).toString('base64');\n",
    ]


def py_crypto(f: Fake3) -> list[Part]:
    return [
        "from cryptography.fernet import Fernet\nimport hashlib\n\nKEY = b'",
        S("generic_secret", f.fernet_key()),
        "'\nfernet = Fernet(KEY)\n\nassert hashlib.md5(b'hello').hexdigest() == '",
        N("md5", "5d41402abc4b2a76b9719d911017c592"),
        "'\nAES_KEY = bytes.fromhex('",
        S("generic_secret", f.hex_secret(64)),
        "')\nIV_LEN = 16\n",
    ]


def py_slack_bolt(f: Fake3) -> list[Part]:
    return [
        'from slack_bolt import App\n\napp = App(\n    token="',
        S("slack_token", f.slack_token()),
        '",\n    signing_secret="',
        S("generic_secret", f.pick(HEX, 32)),
        '",\n)\n\n@app.message("deploy")\ndef deploy(message, say):\n    say(channel="',
        N("resource_id", "C0" + f.pick(UPPER_DIGITS, 9)),
        '", text="deploying")\n',
    ]


def js_discord_bot(f: Fake3) -> list[Part]:
    return [
        "const { Client, GatewayIntentBits, WebhookClient } = require('discord.js');\n"
        "const client = new Client({ intents: [GatewayIntentBits.Guilds] });\n"
        "const alerts = new WebhookClient({ url: '",
        S("webhook_url", f.webhook_url()),
        "' });\n\nclient.once('ready', () => console.log('ready, guild ",
        N("numeric_id", f.pick("0123456789", 18)),
        "'));\nclient.login('",
        S("discord_bot_token", f.discord_bot_token()),
        "');\n",
    ]


def py_telegram_twilio(f: Fake3) -> list[Part]:
    return [
        "from telegram.ext import Application\nfrom twilio.rest import Client\n\n"
        'app = Application.builder().token("',
        S("telegram_bot_token", f.telegram_bot_token()),
        '").build()\n\nsms = Client("',
        N("account_id", "AC" + f.pick(HEX, 32)),
        '", "',
        S("twilio_key", f.twilio_auth_token()),
        '")\nsms.messages.create(to=recipient, from_="',
        N("test_phone", "+15005550006"),
        '", body=text)\n',
    ]


def py_paramiko(f: Fake3) -> list[Part]:
    return [
        'import io, paramiko\n\nPKEY = paramiko.RSAKey.from_private_key(io.StringIO("""',
        S("private_key_pem", f.private_key("RSA PRIVATE KEY")),
        '"""))\n\nssh = paramiko.SSHClient()\nssh.connect("bastion.acme.dev", username="deploy", '
        'password="',
        S("password", f.password()),
        '")\n',
    ]


def go_jwt(f: Fake3) -> list[Part]:
    return [
        'var jwtKey = []byte("',
        S("generic_secret", f.b64_secret(32)),
        '")\n\nfunc TestParse(t *testing.T) {\n\t// captured from staging\n\ttok := "',
        S("jwt", f.jwt()),
        '"\n\tclaims, err := Parse(tok, jwtKey)\n\trequire.NoError(t, err)\n\trequire.Equal(t, "',
        N("uuid", f.uuid()),
        '", claims.SessionID)\n}\n',
    ]


def py_sqlalchemy_redis(f: Fake3) -> list[Part]:
    return [
        "from sqlalchemy import create_engine\nimport redis\n\nengine = create_engine(\n"
        '    "postgresql+psycopg2://analytics:',
        S("password_in_url", f.pick(LOWER_DIGITS + "ABCDEFGHIJKLMNOPQRSTUVWXYZ", 20)),
        '@warehouse.internal:5432/dw"\n)\ncache = redis.Redis(host="cache.internal", port=6379, '
        "password='",
        S("password", f.password()),
        "')\nDEFAULT_TTL = 3600\n",
    ]


def ts_supabase(f: Fake3) -> list[Part]:
    return [
        "import { createClient } from '@supabase/supabase-js'\n\n"
        "// server only: service role bypasses RLS\nexport const admin = createClient(\n"
        "  'https://",
        N("resource_id", f.pick("abcdefghijklmnopqrst", 20)),
        ".supabase.co',\n  '",
        S("jwt", f.jwt()),
        "',\n  { auth: { persistSession: false } },\n)\n",
    ]


def py_smtp(f: Fake3) -> list[Part]:
    return [
        "import smtplib\n\nwith smtplib.SMTP_SSL('smtp.gmail.com', 465) as s:\n"
        "    s.login('alerts.acme', '",
        S("password", f.app_password()),
        "')\n    s.sendmail(FROM, TO, msg.as_string())\n",
    ]


def py_llm_vendor(f: Fake3) -> list[Part]:
    name, key = f.llm_key()
    return [
        'import os\n\n# quick local test, remove\nos.environ["',
        N("secret_name", name),
        '"] = "',
        S("llm_vendor_key", key),
        '"\nclient = make_client(os.environ["',
        N("secret_name", name),
        '"])\n',
    ]


def py_cloud_misc(f: Fake3) -> list[Part]:
    return [
        'import digitalocean, linear\n\nmanager = digitalocean.Manager(token="',
        S("digitalocean_token", f.digitalocean()),
        '")\nissues = linear.Client(api_key="',
        S("linear_key", f.linear_key()),
        '").issues(team="',
        N("uuid", f.uuid()),
        '")\n',
    ]


def js_shopify_notion(f: Fake3) -> list[Part]:
    return [
        "const shopify = shopifyApi({\n  apiKey: '",
        N("client_id", f.pick(HEX, 32)),
        "',  // public app key\n  adminApiAccessToken: '",
        S("shopify_token", f.shopify_token()),
        "',\n  apiVersion: '2024-07',\n});\nconst notion = new Client({ auth: '",
        S("notion_token", f.notion_token()),
        "' });\n",
    ]


CODE2_TEMPLATES: list[tuple[str, Template]] = [
    ("sql postgres", sql_migration),
    ("sql mysql", sql_mysql_users),
    ("ipynb", notebook),
    ("python traceback", py_traceback),
    ("java stack trace", java_trace),
    ("javascript express", js_express_session),
    ("python crypto", py_crypto),
    ("python slack", py_slack_bolt),
    ("javascript discord", js_discord_bot),
    ("python bots", py_telegram_twilio),
    ("python ssh", py_paramiko),
    ("go test", go_jwt),
    ("python db", py_sqlalchemy_redis),
    ("typescript supabase", ts_supabase),
    ("python smtp", py_smtp),
    ("python ai vendor", py_llm_vendor),
    ("python cloud", py_cloud_misc),
    ("javascript saas", js_shopify_notion),
]
