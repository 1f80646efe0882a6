"""Held-out set 3, source code: Python, JavaScript/TypeScript, Go, Java, C#, Ruby, PHP, Rust,
Kotlin, Swift, C, SQL, notebooks and stack traces (see secrets_holdout3.py)."""

from __future__ import annotations

from secrets_holdout3 import (
    B64URL,
    HEX,
    LOWER_DIGITS,
    UPPER_DIGITS,
    Fake3,
    N,
    Part,
    S,
    Template,
    b64url,
)


def py_openai(f: Fake3) -> list[Part]:
    return [
        "import os\nfrom openai import OpenAI\n\n# TODO read ",
        N("secret_name", "OPENAI_API_KEY"),
        " from the env before pushing\nclient = OpenAI(api_key=",
        f.one(['"', "'"]),
        S("openai_key", f.openai_key()),
        '")\n\nresp = client.chat.completions.create(\n    model="gpt-4o-mini",\n'
        '    messages=[{"role": "user", "content": prompt}],\n)\n'
        "# last request id: req_",
        N("trace_id", f.trace_id()),
        "\n",
    ]


def py_django_settings(f: Fake3) -> list[Part]:
    return [
        "# settings/production.py\nfrom .base import *  # noqa\n\nDEBUG = False\nSECRET_KEY = '",
        S("generic_secret", "django-insecure-" + f.pick(LOWER_DIGITS + "!@#%^&*(-_=+)", 50)),
        "'\n\nDATABASES = {\n    'default': {\n        'ENGINE': 'django.db.backends.postgresql',\n"
        "        'NAME': 'shop',\n        'USER': 'shop_app',\n        'PASSWORD': '",
        S("password", f.password()),
        "',\n        'HOST': 'db.internal',\n        'PORT': '5432',\n    }\n}\n\n"
        "EMAIL_HOST = 'smtp.gmail.com'\nEMAIL_HOST_USER = 'noreply.shop'\nEMAIL_HOST_PASSWORD = '",
        S("password", f.app_password()),
        "'\n",
        N("secret_name", "PASSWORD_RESET_TIMEOUT"),
        " = 60 * 60 * 24\nAUTH_PASSWORD_VALIDATORS = [{'NAME': '",
        N(
            "long_identifier",
            "django.contrib.auth.password_validation.UserAttributeSimilarityValidator",
        ),
        "'}]\n",
    ]


def py_boto3(f: Fake3) -> list[Part]:
    account = f.account_id()
    return [
        "import boto3\n\ns3 = boto3.client(\n    's3',\n    aws_access_key_id='",
        S("aws_access_key", f.aws_key_id()),
        "',\n    aws_secret_access_key='",
        S("aws_secret", f.aws_secret()),
        "',\n    region_name='eu-central-1',\n)\n"
        "obj = s3.get_object(Bucket='reports-prod', Key='2024/q3.csv')\n"
        'assert obj["ETag"].strip(\'"\') == "',
        N("md5", f.md5()),
        '"\n# role arn:aws:iam::',
        N("account_id", account),
        ":role/reports-reader\n",
    ]


def py_requests_bearer(f: Fake3) -> list[Part]:
    return [
        "import requests\n\nAPI = 'https://api.acme-internal.dev/v2'\nTOKEN = '",
        S("bearer_token", f.opaque_token()),
        "'\n\ndef get_order(order_id: str) -> dict:\n"
        '    r = requests.get(f"{API}/orders/{order_id}",'
        ' headers={"Authorization": f"Bearer {TOKEN}"})\n'
        "    r.raise_for_status()\n    return r.json()\n\nprint(get_order('",
        N("uuid", f.uuid()),
        "'))\n",
    ]


def py_test_fixtures(f: Fake3) -> list[Part]:
    return [
        "import base64, hashlib\n\ndef test_digest():\n"
        '    assert hashlib.sha256(b"abc").hexdigest() == (\n        "',
        N("sha256", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
        '"\n    )\n\ndef test_decode():\n    blob = "',
        N("base64_fixture", f.base64_fixture()),
        '"\n    assert base64.b64decode(blob)\n\n'
        'def test_charge(stripe_mock):\n    stripe.api_key = "',
        S("stripe_key", f.stripe_key()),
        '"\n    # from the jwt.io debugger\n    token = "',
        N(
            "vendor_example_key",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9l"
            "IiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        ),
        '"\n',
    ]


def js_node_config(f: Fake3) -> list[Part]:
    return [
        "// config/production.js\nmodule.exports = {\n  db: {\n    host: 'pg-main.internal',\n"
        "    user: 'orders',\n    password: '",
        S("password", f.password()),
        "',\n  },\n  jwtSecret: '",
        S("generic_secret", f.hex_secret(64)),
        "',\n  stripe: {\n    publishableKey: '",
        N("publishable_key", "pk_live_51" + f.pick(UPPER_DIGITS + "abcdefghijkmnpqrstuvwxyz", 97)),
        "',\n    secretKey: '",
        S("stripe_key", f.stripe_key()),
        "',\n    webhookSecret: '",
        S("generic_secret", f.stripe_webhook_secret()),
        "',\n  },\n};\n",
    ]


def ts_firebase(f: Fake3) -> list[Part]:
    sender = f.pick("0123456789", 12)
    return [
        'import { initializeApp } from "firebase/app";\n\nconst firebaseConfig = {\n  apiKey: "',
        S("google_api_key", f.google_api_key()),
        '",\n  authDomain: "acme-shop.firebaseapp.com",\n  projectId: "acme-shop",\n'
        '  messagingSenderId: "',
        N("account_id", sender),
        '",\n  appId: "',
        N("client_id", f"1:{sender}:web:{f.pick(HEX, 22)}"),
        '",\n  measurementId: "G-',
        N("client_id", f.pick(UPPER_DIGITS, 10)),
        '",\n};\nexport const app = initializeApp(firebaseConfig);\n',
    ]


def go_db(f: Fake3) -> list[Part]:
    return [
        'package store\n\nimport (\n\t"database/sql"\n\n\t_ "github.com/lib/pq"\n)\n\n'
        'const apiToken = "',
        S("bearer_token", f.opaque_token()),
        '"\n\nfunc Open() (*sql.DB, error) {\n'
        '\treturn sql.Open("postgres", "host=db.internal user=billing password=',
        S("password", f.password(symbols="!#%^*@$")),
        ' dbname=billing sslmode=require")\n}\n\nfunc OpenLegacy() (*sql.DB, error) {\n'
        '\treturn sql.Open("mysql", "legacy:',
        S("password_in_url", f.pick(LOWER_DIGITS, 18)),
        '@tcp(mysql-legacy:3306)/shop?parseTime=true")\n}\n',
    ]


def go_sum(f: Fake3) -> list[Part]:
    return [
        "module github.com/acme/ingest\n\ngo 1.22\n\nrequire (\n\tgithub.com/jackc/pgx/v5 v",
        N("version", f.version()),
        "\n\tgolang.org/x/sync v0.0.0-20240104000000-",
        N("short_sha", f.pick(HEX, 12)),
        "\n)\n\n// go.sum\ngithub.com/jackc/pgx/v5 v5.5.1 ",
        N("go_sum_hash", f.go_sum()),
        "\ngithub.com/jackc/pgx/v5 v5.5.1/go.mod ",
        N("go_sum_hash", f.go_sum()),
        "\n",
    ]


def java_mailer(f: Fake3) -> list[Part]:
    return [
        "public class Mailer {\n    private static final long serialVersionUID = ",
        N("numeric_id", f.pick("123456789", 18)),
        'L;\n    private static final String SENDGRID_API_KEY = "',
        S("sendgrid_key", f.sendgrid_key()),
        '";\n\n    Connection connect() throws SQLException {\n'
        "        return DriverManager.getConnection(\n"
        '            "jdbc:mysql://db:3306/crm", "root", "',
        S("password", f.password()),
        '");\n    }\n}\n',
    ]


def csharp_service(f: Fake3) -> list[Part]:
    return [
        '[Guid("',
        N("uuid", f.uuid().upper()),
        '")]\npublic class Notifier\n{\n    private const string Conn =\n'
        '        "Server=tcp:acme-sql.database.windows.net,1433;Initial Catalog=crm;'
        "User ID=crmadmin;Password=",
        S("password", f.password(symbols="!#%^*@$")),
        ';Encrypt=True;";\n\n'
        '    private readonly SmtpClient _smtp = new("smtp.sendgrid.net", 587)\n'
        '    {\n        Credentials = new NetworkCredential("apikey", "',
        S("sendgrid_key", f.sendgrid_key()),
        '")\n    };\n}\n',
    ]


def ruby_clients(f: Fake3) -> list[Part]:
    return [
        "require 'octokit'\nrequire 'stripe'\n\nStripe.api_key = '",
        S("stripe_key", f.stripe_key()),
        "'\nclient = Octokit::Client.new(access_token: '",
        S("github_token", f.github_token()),
        "')\nrelease = client.latest_release('acme/cli')\n# sha1 of the tarball: ",
        N("checksum", f.git_sha()),
        "\nputs release.tag_name # => v",
        N("version", f.version()),
        "\n",
    ]


def php_wp_config(f: Fake3) -> list[Part]:
    salt = "".join(
        f.r.choice(
            "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz0123456789!#%&*+-:;<=>?@[]^_{|}~"
        )
        for _ in range(64)
    )
    return [
        "<?php\ndefine( 'DB_NAME', 'wp_shop' );\ndefine( 'DB_USER', 'wp_shop' );\n"
        "define( 'DB_PASSWORD', '",
        S("password", f.password()),
        "' );\ndefine( 'DB_HOST', 'localhost' );\n\ndefine( 'AUTH_KEY',         '",
        S("generic_secret", salt),
        "' );\ndefine( 'NONCE_KEY',        '",
        S("generic_secret", salt[::-1]),
        "' );\n\n$table_prefix = 'wp_';\n",
    ]


def php_mailer(f: Fake3) -> list[Part]:
    return [
        "<?php\n$mail = new PHPMailer(true);\n$mail->isSMTP();\n$mail->Host = 'smtp.mailgun.org';\n"
        "$mail->SMTPAuth = true;\n$mail->Username = '",
        S("email", "postmaster@mg.acme-corp.io"),
        "';\n$mail->Password = '",
        S("password", f.password()),
        "';\n$mg = Mailgun::create('",
        S("mailgun_key", f.mailgun_key()),
        "');\n",
    ]


def rust_anthropic(f: Fake3) -> list[Part]:
    return [
        'let resp = reqwest::Client::new()\n    .post("https://api.anthropic.com/v1/messages")\n'
        '    .header("x-api-key", "',
        S("anthropic_key", f.anthropic_key()),
        '")\n    .header("anthropic-version", "2023-06-01")\n    .json(&body)\n    .send()\n'
        '    .await?;\n\n// Cargo.lock\n[[package]]\nname = "reqwest"\nversion = "',
        N("version", f.version()),
        '"\nchecksum = "',
        N("checksum", f.sha256()),
        '"\n',
    ]


def kotlin_gradle(f: Fake3) -> list[Part]:
    return [
        "android {\n    defaultConfig {\n"
        '        applicationId "dev.acme.rides"\n        versionCode ',
        N("numeric_id", str(f.num(100000, 999999))),
        '\n        buildConfigField "String", "MAPS_API_KEY", "\\"',
        S("google_api_key", f.google_api_key()),
        '\\""\n    }\n    signingConfigs {\n        release {\n'
        '            storeFile file("release.jks")\n            storePassword "',
        S("password", f.password()),
        '"\n            keyAlias "upload"\n            keyPassword "',
        S("password", f.password()),
        '"\n        }\n    }\n}\n',
    ]


def _mapbox(f: Fake3, prefix: str) -> str:
    user = f.one(["acme", "rides-app", "geo-team"])
    return prefix + b64url({"u": user, "a": f.pick(LOWER_DIGITS, 25)}) + "." + f.pick(B64URL, 22)


def swift_mapbox(f: Fake3) -> list[Part]:
    return [
        "// Info.plist has MBXAccessToken = ",
        N("publishable_key", _mapbox(f, "pk.")),
        '\nlet downloadsToken = "',
        S("mapbox_token", _mapbox(f, "sk.")),
        '"  // secret, scope DOWNLOADS:READ\nlet revenueCatKey = ProcessInfo.processInfo'
        '.environment["',
        N("secret_name", "REVENUECAT_SECRET_KEY"),
        '"]\n',
    ]


def c_esp32(f: Fake3) -> list[Part]:
    return [
        '#include <WiFi.h>\n#include <PubSubClient.h>\n\n#define WIFI_SSID "Shed-IoT"\n'
        '#define WIFI_PASSWORD "',
        S("password", f.password()),
        '"\nconst char* mqtt_user = "sensor-07";\nconst char* mqtt_pass = "',
        S("password", f.pick(LOWER_DIGITS, 16)),
        '";\n// broker cert SHA1 fingerprint\nconst char* fingerprint = "',
        N("key_fingerprint", ":".join(f.pick(HEX.upper(), 2) for _ in range(20))),
        '";\nconst char* root_ca = R"(\n',
        N("certificate", f.public_key_pem("CERTIFICATE")),
        '\n)";\n',
    ]


CODE_TEMPLATES: list[tuple[str, Template]] = [
    ("python", py_openai),
    ("python settings", py_django_settings),
    ("python aws", py_boto3),
    ("python http", py_requests_bearer),
    ("python test", py_test_fixtures),
    ("javascript config", js_node_config),
    ("typescript firebase", ts_firebase),
    ("go", go_db),
    ("go.mod/go.sum", go_sum),
    ("java", java_mailer),
    ("csharp", csharp_service),
    ("ruby", ruby_clients),
    ("php wp-config", php_wp_config),
    ("php", php_mailer),
    ("rust + Cargo.lock", rust_anthropic),
    ("gradle", kotlin_gradle),
    ("swift", swift_mapbox),
    ("arduino c", c_esp32),
]
