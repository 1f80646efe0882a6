"""PII scrubbing: what must go, what must stay, and the counts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from traffic.export.pii import luhn_valid, scrub_messages, scrub_text

POSITIVE = [
    # (text, expected output, kind)
    ("mail john.doe@acme.io now", "mail <EMAIL> now", "email"),
    ("cc: a+b@sub.corp-mail.co.uk.", "cc: <EMAIL>.", "email"),
    ("key sk-proj-abcDEF1234567890abcdefghij", "key <SECRET>", "secret"),
    ("sk-ant-api03-abcdefghijklmnop1234567890_XY", "<SECRET>", "secret"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe <SECRET>", "secret"),
    ("aws AKIAIOSFODNN7EXAMPLE ok", "aws <SECRET> ok", "secret"),
    ("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "<SECRET>", "secret"),
    ("token xoxb-1234567890-abcdefGHIJ", "token <SECRET>", "secret"),
    ("google AIzaSyA1234567890abcdefghijklmnopqrstuv", "google <SECRET>", "secret"),
    ("hf_abcdefghijklmnopqrstuvwxyz0123456789", "<SECRET>", "secret"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFU",
        "<SECRET>",
        "secret",
    ),
    ("Authorization: Bearer abcdef0123456789xyz", "Authorization: Bearer <SECRET>", "secret"),
    (
        "-H 'Authorization: Basic dXNlcjpwYXNzd29yZA=='",
        "-H 'Authorization: Basic <SECRET>'",
        "secret",
    ),
    ('api_key = "d41d8cd98f00b204e9800998ecf8427e"', 'api_key = "<SECRET>"', "secret"),
    ("OPENAI_API_KEY=abc123def456ghi789jkl", "OPENAI_API_KEY=<SECRET>", "secret"),
    ('{"password": "hunter2hunter2"}', '{"password": "<SECRET>"}', "secret"),
    ("client_secret: 'Zm9vYmFyYmF6cXV4'", "client_secret: '<SECRET>'", "secret"),
    ("url?access_token=0123456789abcdef0123&x=1", "url?access_token=<SECRET>&x=1", "secret"),
    ('db_password := "s3cr3t!pass"', 'db_password := "<SECRET>"', "secret"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nabc\n-----END RSA PRIVATE KEY-----",
        "<SECRET>",
        "secret",
    ),
    ("server 203.0.113.5 down", "server <IP> down", "ip"),
    ("dns 8.8.8.8:53", "dns <IP>:53", "ip"),
    ("internal 10.0.0.12/8", "internal <IP>/8", "ip"),
    ("bare 1.2.3.4 here", "bare <IP> here", "ip"),
    ("v6 2001:db8:85a3::8a2e:370:7334 end", "v6 <IP> end", "ip"),
    ("link fe80::1ff:fe23:4567:890a.", "link <IP>.", "ip"),
    ("http://[2001:db8::1]:8080/", "http://[<IP>]:8080/", "ip"),
    ("call +1 415 555 0123 today", "call <PHONE> today", "phone"),
    ("+44 20 7946 0958", "<PHONE>", "phone"),
    ("(415) 555-0123", "<PHONE>", "phone"),
    ("415-555-0123 or 415.555.0123", "<PHONE> or <PHONE>", "phone"),
    ("Phone: 030 1234567", "Phone: <PHONE>", "phone"),
    ("tel +49 30 1234567", "tel <PHONE>", "phone"),
    ("card 4111 1111 1111 1111 exp", "card <CREDIT_CARD> exp", "credit_card"),
    ("4111-1111-1111-1111", "<CREDIT_CARD>", "credit_card"),
    ("amex 378282246310005", "amex <CREDIT_CARD>", "credit_card"),
    ("amex 3782 822463 10005", "amex <CREDIT_CARD>", "credit_card"),
    ("mc 5555555555554444", "mc <CREDIT_CARD>", "credit_card"),
]

NEGATIVE = [
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "uuid 0190f5c2-7e8a-7b3c-9d4e-5f6a7b8c9d0e",
    "date 2024-01-15 time 12:30:45",
    "colour #123456 and #ABCDEF and 0xDEADBEEF",
    "epoch 1700000000 and id 4155550123 and snowflake 1234567890123456789",
    'version 1.2.3.4 and v1.2.3.4 and pkg==1.2.3.4 and Version("1.0.0.0")',
    "semver 1.2.3 and OID 1.3.6.1.4.1.311 and 10.0.0.1.5",
    "localhost 127.0.0.1 bind 0.0.0.0 mask 255.255.255.0 and ::1 and ::",
    "leading zeros 01.02.03.04",
    "slice a[1::2] and b[::3], std::vector<int>, dead::beef",
    "pi 3.14159 and 1e+10 and a+123456789 and x = 1234 - 5678",
    'tokenizer: "bert-base-uncased"',
    "max_tokens: 1024, token = get_token(), password: str",
    'api_key=os.environ["API_KEY"]',
    'password = "${DB_PASSWORD}" and token: "{{ secrets.TOKEN }}"',
    'api_key = "short"',
    "git@github.com:org/repo.git",
    "jane@example.com and bob@mail.example.org and ci@build.test",
    "@types/node and @pytest.fixture",
    "not a card 4111 1111 1111 1112 nor 1234567812345678",
    "invalid area 123-456-7890",
    "sk-learn is a library; sk-this-is-just-a-css-class-name",
    "Bearer authentication scheme",
    "the <EMAIL> <SECRET> <IP> <PHONE> placeholders stay",
]


@pytest.mark.parametrize(("text", "expected", "kind"), POSITIVE)
def test_positive(text: str, expected: str, kind: str) -> None:
    out, counts = scrub_text(text)
    assert out == expected
    assert set(counts) == {kind}
    assert counts[kind] == expected.count(f"<{kind.upper()}>")


@pytest.mark.parametrize("text", NEGATIVE)
def test_negative(text: str) -> None:
    out, counts = scrub_text(text)
    assert out == text
    assert not counts


@pytest.mark.parametrize("text", [p[0] for p in POSITIVE] + NEGATIVE)
def test_idempotent(text: str) -> None:
    once, _ = scrub_text(text)
    twice, counts = scrub_text(once)
    assert twice == once
    assert not counts


def test_mixed_text_counts_every_kind() -> None:
    text = (
        "Hi, I'm at jo@corp.io or +1 212 555 0147; prod box 198.51.99.7, "
        "key sk-abcdefghijklmnopqrstuvwxyz123456, card 4242424242424242."
    )
    out, counts = scrub_text(text)
    assert out == (
        "Hi, I'm at <EMAIL> or <PHONE>; prod box <IP>, key <SECRET>, card <CREDIT_CARD>."
    )
    assert counts == {"email": 1, "phone": 1, "ip": 1, "secret": 1, "credit_card": 1}


def test_secret_inside_json_arguments_keeps_json_valid() -> None:
    import json

    args = json.dumps(
        {"headers": {"Authorization": "Bearer abcdefghij0123456789"}, "to": "ops@corp.io"}
    )
    out, counts = scrub_text(args)
    assert json.loads(out) == {"headers": {"Authorization": "Bearer <SECRET>"}, "to": "<EMAIL>"}
    assert counts == {"secret": 1, "email": 1}


def test_scrub_messages_covers_content_and_tool_arguments_without_mutation() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "admin is root@corp.io"},
        {"role": "user", "content": "deploy to 203.0.113.9"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "ssh", "arguments": '{"host":"203.0.113.9"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    before = copy.deepcopy(messages)
    out, counts = scrub_messages(messages)
    assert messages == before
    assert out[0]["content"] == "admin is <EMAIL>"
    assert out[1]["content"] == "deploy to <IP>"
    assert out[2]["tool_calls"][0]["function"]["arguments"] == '{"host":"<IP>"}'
    assert out[2]["tool_calls"][0]["id"] == "c1"
    assert out[3] == messages[3]
    assert counts == {"email": 1, "ip": 2}


@pytest.mark.parametrize(
    ("digits", "valid"),
    [
        ("4111111111111111", True),
        ("4111111111111112", False),
        ("79927398713", True),
        ("378282246310005", True),
        ("0", True),
        ("1", False),
    ],
)
def test_luhn(digits: str, valid: bool) -> None:
    assert luhn_valid(digits) is valid
