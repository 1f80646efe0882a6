"""detect-secrets' plugins as span detectors: exact spans, its filters, no network."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest
import requests

from scripts.secrets_eval import CORPUS, load_corpus
from traffic.scrub import plugins
from traffic.scrub.scrubber import LIBRARY_PLUGINS


def _found(text: str, *names: str) -> list[tuple[str, str]]:
    return [(d.kind, text[d.start : d.end]) for d in plugins.detect(text, names)]


def test_every_chosen_plugin_is_known() -> None:
    assert set(LIBRARY_PLUGINS) <= set(plugins.PLUGIN_RULES)


def test_a_url_credential_is_the_password_alone() -> None:
    text = 'psql "postgresql://admin:Winter62-db@10.2.0.14:5432/prod"'
    assert _found(text, "basic_auth_url") == [("password_in_url", "Winter62-db")]


def test_an_azure_account_key_leaves_its_name() -> None:
    key = "DicAK8zmr4MFWocyQzbSsK8gCB3wAP7cxZrL6FuF1+qvXtzNFOyGYFF7YrksWZ7Yq6yWZQ4vqAqDeWmz/Uk2wn=="
    text = f"AccountName=acme;AccountKey={key};EndpointSuffix=core.windows.net"
    assert _found(text, "azure_storage") == [("azure_storage_key", key)]


def test_the_keyword_plugin_names_passwords_and_finds_every_occurrence() -> None:
    text = "  POSTGRES_PASSWORD: tiger2023#\n  jwt_secret: ba8cacad70ac97bb0daea1a6823377c7"
    assert _found(text, "keyword") == [
        ("password", "tiger2023#"),
        ("generic_secret", "ba8cacad70ac97bb0daea1a6823377c7"),
    ]


@pytest.mark.parametrize(
    "line",
    [
        "    api_key: SecretStr",
        "    password_reset_timeout: int = 3600",
        "password: ${DB_PASSWORD}",
        "secret = get_secret_key()",
        "api_key: <your-key>",
    ],
)
def test_the_keyword_plugin_skips_references_and_annotations(line: str) -> None:
    assert _found(line, "keyword") == []


def test_plugins_run_without_settings_or_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise AssertionError("a plugin tried the network")

    monkeypatch.setattr(requests.Session, "request", refuse)
    found = 0
    for item in load_corpus(CORPUS):
        found += len(plugins.detect(item["text"], plugins.PLUGIN_RULES))
    assert found > 300


def test_a_dotted_java_name_is_not_a_discord_token() -> None:
    text = "x = NotificationServiceFactory.create.AbstractNotificationHandlerBase(cfg)"
    assert _found(text, "discord") == []
    token = "MTA4NzQ1MjQ2NzEyMzQ1Njc4.GhT2kL.abcdefghijklmnopqrstuvwxyz0"
    assert _found(f"client.login('{token}')", "discord") == [("discord_bot_token", token)]
