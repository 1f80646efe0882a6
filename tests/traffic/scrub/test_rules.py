"""The hand-written detectors: kinds, spans and the checks that keep lookalikes."""

from __future__ import annotations

import pytest

from traffic.scrub.rules import detect, luhn_valid


def _found(text: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in detect(text)]


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('DB_PASSWORD = "s3cr3t!pass"', "password"),
        ("'PASSWORD': 'QnG!lTdYkC*A%GN%ohK'", "password"),
        ("AWS_SECRET_ACCESS_KEY = 'ksvvjlqYSp1LCSlOnezrQlO2T2430/cyPg2m4pmQ'", "aws_secret"),
        ('client_secret: "Zm9vYmFyYmF6cXV4"', "generic_secret"),
    ],
)
def test_an_assigned_value_is_named_by_its_whole_variable_name(text: str, kind: str) -> None:
    assert [k for k, _ in _found(text)] == [kind]


@pytest.mark.parametrize(
    "text",
    [
        '"nextPageToken": "eyJvZmZzZXQiOiAzMzIsICJ0cyI6IDMwNjIyODg1M30="',
        'page_token = "CiAKGjBpNDd2Nmp3Z2IwcXQ"',
        "continuationToken: aGVsbG8gd29ybGQgY3Vyc29yIDE",
    ],
)
def test_cursor_names_ending_in_token_are_not_credentials(text: str) -> None:
    assert _found(text) == []


@pytest.mark.parametrize(
    "token",
    [
        "ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        "AKIAXXXXXXXXXXXXXXXX",
        "sk-this-is-just-a-css-class-name",
        "xoxb-your-bot-token",
    ],
)
def test_a_vendor_prefix_needs_a_token_after_it(token: str) -> None:
    assert _found(f"x = {token}") == []


def test_letters_only_hugging_face_tokens_are_tokens() -> None:
    assert _found("HF 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") == [
        ("huggingface_token", "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")
    ]


def test_a_registry_auth_value_counts_only_when_it_decodes_to_user_and_password() -> None:
    assert _found('"auth": "ZGVwbG95OldpbnRlcjUwLWRi"') == [
        ("basic_auth", "ZGVwbG95OldpbnRlcjUwLWRi")
    ]
    assert _found('"auth": "aGVsbG8gd29ybGQ="') == []  # "hello world"


@pytest.mark.parametrize(
    ("text", "password"),
    [
        ("mysql -h db -u root -pch4yrUQgKdUmgI shop", "ch4yrUQgKdUmgI"),
        ("curl -u deploy:Maple55-db https://ci.acme-corp.io/", "Maple55-db"),
        ('curl -s https://x -u "bob:s3cret!" | jq .', "s3cret!"),
    ],
)
def test_passwords_on_a_command_line(text: str, password: str) -> None:
    assert _found(text) == [("password", password)]


def test_ports_and_bare_flags_are_not_passwords() -> None:
    assert _found("ssh -p 2222 host && mysql -p && curl -u user https://x") == []


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


def test_a_token_scheme_under_a_prefixed_authorization_key_is_a_token() -> None:
    text = "'HTTP_AUTHORIZATION': 'Token 5f941fe6c47c46f341dd1d9bdef4e842d2b14d23',"
    assert ("bearer_token", "5f941fe6c47c46f341dd1d9bdef4e842d2b14d23") in [
        (d.kind, text[d.start : d.end]) for d in detect(text)
    ]


@pytest.mark.parametrize(
    ("text", "personal"),
    [
        ('"client_email": "etl@proj-1.iam.gserviceaccount.com"', False),
        ("ssh -i ~/.ssh/id deploy@bastion.corp.dev uptime", False),
        ("scp build.tgz ops@10.20.0.5:/tmp/", False),
        ("contact jane.doe@corp.dev for access", True),
        ("Address = 10.8.0.2/24", False),
        ("upstream 192.168.10.4:8080;", False),
        ("client 172.20.1.9 connected", False),
        ("client 203.0.113.7 connected", True),
    ],
)
def test_machine_identities_and_private_addresses_are_not_personal(
    text: str, personal: bool
) -> None:
    kinds = {d.kind for d in detect(text)} & {"email", "ip"}
    assert bool(kinds) is personal, kinds
