"""Secrets known by their name (traffic.scrub.named) and the vendor formats added with them:
each form finds the value alone, and the code, references and placeholders that look like it
survive the whole scrubber."""

from __future__ import annotations

import pytest

from traffic.scrub import detect as scrubber_detect
from traffic.scrub.rules import detect

HEX64 = "8fc23fb9d6239cab32db1b1c88696e9eea14f00dee893935dafd78a0ce5c1552"


def _found(text: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in detect(text, pii=False)]


def _survives(text: str) -> None:
    found = [(d.kind, text[d.start : d.end]) for d in scrubber_detect(text, pii=False)]
    assert found == [], text


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        # unquoted passwords that start with a symbol (YAML) or hold one (.properties)
        ("  DB_PASSWORD: *wvIuVPsiQM59rR2L", "password", "*wvIuVPsiQM59rR2L"),
        ("spring.mail.password=!DOphDULc6CDd", "password", "!DOphDULc6CDd"),
        ("      - MYSQL_ROOT_PASSWORD=grKxy&vkrqJG", "password", "grKxy&vkrqJG"),
        ('GET /login?user=x&password=tiger_8EilU8X2x HTTP/1.1"', "password", "tiger_8EilU8X2x"),
        ('psql "host=db user=app password=harbor-Y%+5VFVG sslmode=require"', "password", None),
        ("Server=sql;Uid=sa;Pwd=Zq8!wLm2x;Encrypt=True", "password", "Zq8!wLm2x"),
        # "pass" as a word of its own
        ("web1 ansible_ssh_pass=Nimbus-T3Fo8c0hi", "password", "Nimbus-T3Fo8c0hi"),
        ("smtpPass: Nimbus_nlUQLDXbs", "password", "Nimbus_nlUQLDXbs"),
        # keys and salts named for what they do
        (f"SIGNING_KEY={HEX64}", "generic_secret", HEX64),
        ('var hmacKey = []byte("vpb9vfB9DLte5hg1eTFYiOhQVzWV0Miq")', "generic_secret", None),
        (
            "APP_KEY=base64:BRGTqUAVhURWwbT/Dmmuz6ljqOFAHUn2DVIVRBJMGDI=",
            "generic_secret",
            "BRGTqUAVhURWwbT/Dmmuz6ljqOFAHUn2DVIVRBJMGDI=",
        ),
        (f"export AUTH_SALT='{HEX64}'", "generic_secret", HEX64),
        ('datadog_app_key = "bff7c9f62f023cbc33266a9817828fac1ff991fc"', "generic_secret", None),
        ("define( 'AUTH_KEY', 'v9bj2FJV?n^Udk)kns}w4oD32R?8`4cu-i.Tcn' );", "generic_secret", None),
        # a lookup's default
        ('os.getenv("DB_PASSWORD", "#GM!X^Hao@zFA")', "password", "#GM!X^Hao@zFA"),
        ("define( 'DB_PASSWORD', 'harbor@2017' );", "password", "harbor@2017"),
        ("const s = process.env.JWT_SECRET ?? 'N-jUuQukZiic0j5kS3WSWq';", "generic_secret", None),
        ('System.getProperty("db.password", "Pr0d!pass")', "password", "Pr0d!pass"),
        # name/value pairs
        ('- name: INTERNAL_API_TOKEN\n  value: "jiCE4cVJ8HRDzYKV4Nwg"', "generic_secret", None),
        ('{"name": "DB_PASSWORD", "value": "hunter22x"}', "password", "hunter22x"),
        # long options and tools' password flags
        ("migrate --db-password Qz8!wx2Lm up", "password", "Qz8!wx2Lm"),
        ("docker login -u ci-bot -p pepper-vzr98YU.d0 registry.io", "password", None),
        ("az login --service-principal -u app -p s3cretPW9 --tenant t", "password", "s3cretPW9"),
        ("redis-cli -h cache -a Copper.JaPhNAXrf --no-auth-warning", "password", None),
        ("sshpass -p Hunter2x ssh deploy@host", "password", "Hunter2x"),
        ("mongosh -u admin -p Xy7secret22 shop", "password", "Xy7secret22"),
        ("poetry config http-basic.acme ci otter.YcUj9cjBI", "password", "otter.YcUj9cjBI"),
        # session cookies, .pgpass
        (
            "-H 'cookie: _ga=GA1.1.449.235; session_id=AzIbILfeluthS1F8x2HRwCXz'",
            "session_cookie",
            "AzIbILfeluthS1F8x2HRwCXz",
        ),
        ("db.acme.internal:5432:*:reporting:Glacier._z6fj5XCNy3", "password", None),
    ],
)
def test_a_value_under_a_secret_name_is_found_alone(
    text: str, kind: str, value: str | None
) -> None:
    found = _found(text)
    assert len(found) == 1, found
    assert found[0][0] == kind
    if value is not None:
        assert found[0][1] == value
    assert scrubber_detect(text, pii=False), "the scrubber keeps the rule's span"


@pytest.mark.parametrize(
    "text",
    [
        # code that reads, hashes or compares a password
        'password = request.form["password"]',
        'password = getpass.getpass("Password: ")',
        "password = settings.DB_PASSWORD",
        "password = hash_password(raw_password)",
        "password: str = Field(..., min_length=8)",
        'if token == "expired_token_v2":',
        # references, templates, YAML tags and aliases, SQL parameters, paths
        "DB_PASSWORD=$DB_PASSWORD",
        "password: ${DB_PASSWORD}",
        "password: !vault |",
        "password: *default_password",
        "SELECT * FROM users WHERE password = :password",
        "PWD=/home/maria/project",
        "ssh_key: ~/.ssh/id_rsa",
        "export TOKEN=$(gcloud auth print-access-token)",
        # "pass" inside a word; keys named for what they index
        "bypass: abc12345",
        "passport: AB1234567",
        'cache_key = "5d41402abc4b2a76b9719d911017c592"',
        "sort_key: created_at",
        '"private_key_id": "1234567890abcdef1234567890abcdef12345678"',
        'idempotency_key = "9f1c2e4a-77b1-4c1e-9a0b-3c2d1e0f9a8b"',
        "salt = os.urandom(16)",
        # words where a lookup, a pair or a flag takes another name
        'os.getenv("SECRET_KEY", "insecure-dev-key")',
        "@field_serializer('password', 'password_bytes', when_used='json')",
        'fields = ("username", "password1", "password2")',
        '{"name": "password", "value": "Password"}',
        'value: "{{ .Values.password }}"',
        'parser.add_argument("--password", help="the password")',
        "--password-file /run/secrets/pw --token $GITHUB_TOKEN",
        'llm --api-key "$OPENAI_API_KEY" run',
        "docker login -u ci --password-stdin registry.io",
        "docker login -u ci -p $DOCKER_PASSWORD registry.io",
        # a regex in a raw string, cookies that are not sessions, colon-separated lines
        "key_or_pass = r'(?:key|pwd|password|pass|token)'",
        "Cookie: _ga=GA1.2.3.4; theme=dark-mode-preferred",
        "main.go:42:13: undefined: handler",
        # placeholders phrased as instructions
        "SECRET_KEY=replace-with-a-long-random-string",
        "JWT_SECRET=not_a_real_secret",
    ],
)
def test_lookalikes_of_named_secrets_survive(text: str) -> None:
    _survives(text)


@pytest.mark.parametrize(
    ("token", "kind"),
    [
        ("dop_v1_" + HEX64, "digitalocean_token"),
        ("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", "shopify_token"),
        ("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", "groq_key"),
        ("r8_cIcLCRCfWeCcA2AAYW5wIxdwC3DtysA9FAaC1", "replicate_token"),
        ("PMAK-fade3ede23821f39347ff838-274303750076621f155c88a1530a846f0a", "postman_key"),
        ("lin_api_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5bC7d", "linear_key"),
        ("dapi4c89f25c0742630ade4dd3774d4a9afa", "databricks_token"),
        ("NRAK-" + "A1B2C3D4E5F6G7H8J9K0L1M2N3P", "newrelic_key"),
        ("dBs3Q~58FxCxUjgK5VhxKjUZfQUHr-v6fnXfEWny", "azure_client_secret"),
        ("django-insecure-o-(cd7obmgsl13&d(50lqxosfvp()8sd@e%+&+y+b-zv-2a4ed", "generic_secret"),
    ],
)
def test_vendor_formats_are_found_bare(token: str, kind: str) -> None:
    assert _found(f"$ tool --flag {token} next") == [(kind, token)]


@pytest.mark.parametrize(
    "text",
    [
        "gsk_" + "x" * 52,
        "shpat_" + "x" * 32,
        "dop_v1_" + "x" * 64,
        "NRAK-" + "X" * 27,
        "the Q~ operator in ~/notes",
    ],
)
def test_vendor_placeholders_survive(text: str) -> None:
    _survives(f"export KEY_NAME_UNUSED={text}")


@pytest.mark.parametrize(
    ("text", "kind", "value"),
    [
        # a name, a space, a quoted value: Gradle, C's #define, SQL
        ('        storePassword "Qm3vLx8pzW2"', "password", "Qm3vLx8pzW2"),
        ('#define MQTT_PASSWORD "amber2011!"', "password", "amber2011!"),
        # a setter command, a .netrc entry
        (
            "aws configure set aws_secret_access_key Zq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQu",
            "aws_secret",
            None,
        ),
        (
            "machine api.vendor.io\n  login ops@corp.io\n  password 7d1c9a40-2f6b-4e1d",
            "password",
            None,
        ),
        # an element named by a secret name (Maven)
        ("<server>\n  <password>Wq9!Lm2xZr</password>\n</server>", "password", "Wq9!Lm2xZr"),
        # escaped quotes (a notebook's JSON), a decoding call
        (
            '"os.environ[\\"WANDB_API_KEY\\"] = \\"4f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39\\"\\n"',
            "generic_secret",
            "4f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a39",
        ),
        (
            "AES_KEY = bytes.fromhex('9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b')",
            "generic_secret",
            "9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b",
        ),
        # keys named for what they do
        ("PresharedKey = Kq8Lr2Xw1vYb7Tn0sPz4a6dGmE3hJcQuR5tWxZ9y1B2=", "generic_secret", None),
        ("    erlangCookie: Q7ZP2LM8XW4R9TK3VN6B", "generic_secret", "Q7ZP2LM8XW4R9TK3VN6B"),
        # a passphrase under a password name; an app password
        ("    password: ochre-lynx-pivot-amber", "password", "ochre-lynx-pivot-amber"),
        ("EMAIL_HOST_PASSWORD = 'abcd efgh ijkl mnop'", "password", "abcd efgh ijkl mnop"),
    ],
)
def test_values_after_a_name_in_more_syntaxes(text: str, kind: str, value: str | None) -> None:
    found = [(d.kind, text[d.start : d.end]) for d in scrubber_detect(text, pii=False)]
    assert any(k == kind and (value is None or v == value) for k, v in found), found


@pytest.mark.parametrize(
    "text",
    [
        'raise ValueError("invalid token")',
        'log.info("password reset for %s", user)',
        "    password: replace-with-your-own",
        "    existingSecret: worker-postgresql-credentials",
        "storePassword System.getenv('STORE_PASSWORD')",
        "<password>${env.NEXUS_PASSWORD}</password>",
        "password_file /etc/app/db.pass",
        "docker login -u ci -p **** registry.corp.io",
    ],
)
def test_phrases_references_and_masks_after_a_name_survive(text: str) -> None:
    _survives(text)
