"""Consent per key: a key's own ``training_use``, else its team's, else none (the config's
default applies where the record is stamped); set per key and per team, through the service and
the ``switchyard keys`` command, each change in the change log."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import pytest

from gateway.admin.keys_cli import main as cli_main
from gateway.auth import AuthConfig, Authenticator, ConsentService, KeyService
from gateway.auth.consent import effective_training_use
from gateway.auth.keys import Principal

# The store tests' fixtures: SQLite in tmp_path, and PostgreSQL in a schema of its own.
from tests.traffic.store.conftest import store_url
from traffic.store import ApiKeyRecord, StoreBackend, StoreConfig, TeamRecord, open_store
from traffic.store.console_queries import changes
from traffic.store.records import ChangeRecord

__all__ = ["store_url"]


@pytest.fixture
async def store(store_url: str) -> AsyncIterator[StoreBackend]:
    backend = open_store(StoreConfig(url=store_url, connect_timeout_s=3))
    await backend.connect()
    yield backend
    await backend.close()


async def _principal(store: StoreBackend, plaintext: str) -> Principal:
    return await Authenticator(store, AuthConfig()).authenticate(plaintext)


async def test_a_key_takes_its_own_setting_else_its_teams_else_none(store: StoreBackend) -> None:
    keys, consent = KeyService(store), ConsentService(store)
    _, lone = await keys.create("lone")
    _, teamless_team = await keys.create("new-team", team_id="nobody-set-it")
    _, member = await keys.create("member", team_id="platform")
    _, own = await keys.create("own", team_id="platform", training_use="allow")
    await consent.set_team("platform", "deny")
    assert (await _principal(store, lone)).training_use is None  # the config's default
    assert (await _principal(store, teamless_team)).training_use is None
    assert (await _principal(store, member)).training_use == "deny"  # the team's
    assert (await _principal(store, own)).training_use == "allow"  # its own wins


async def test_a_consent_change_is_taken_at_the_next_read(store: StoreBackend) -> None:
    record, plaintext = await KeyService(store).create("ide", team_id="ml")
    auth = Authenticator(store, AuthConfig())
    assert (await auth.authenticate(plaintext)).training_use is None
    consent = ConsentService(store)
    await consent.set_team("ml", "redact")
    auth.invalidate(record.id)  # what the admin operations do in their process
    assert (await auth.authenticate(plaintext)).training_use == "redact"
    changed = await consent.set_key(record.id, team_id="ml", training_use="deny")
    assert changed is not None and changed.training_use == "deny"
    auth.invalidate(record.id)
    assert (await auth.authenticate(plaintext)).training_use == "deny"
    assert await consent.set_key("no-such-key", team_id=None, training_use=None) is None


async def test_an_unknown_stored_setting_reads_as_deny(store: StoreBackend) -> None:
    record, plaintext = await KeyService(store).create("from-the-future")
    await store.set_api_key_consent(record.id, team_id=None, training_use="only-on-tuesdays")
    assert (await _principal(store, plaintext)).training_use == "deny"
    stored = await store.get_api_key(record.id)
    assert stored is not None
    assert effective_training_use(stored, {}, "allow") == ("deny", "key")


async def test_bad_teams_and_settings_are_refused(store: StoreBackend) -> None:
    keys = KeyService(store)
    with pytest.raises(ValueError, match="training_use"):
        await keys.create("x", training_use="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="team"):
        await keys.create("x", team_id="has spaces")
    with pytest.raises(ValueError, match="team"):
        await ConsentService(store).set_team("", "deny")
    assert await keys.list() == []


def test_effective_setting_names_where_it_comes_from() -> None:
    key = ApiKeyRecord(name="k", key_hash="h", prefix="sy-", team_id="t")
    teams = {"t": TeamRecord(id="t", training_use="redact")}
    assert effective_training_use(key, teams, "deny") == ("redact", "team")
    assert effective_training_use(key, {}, "deny") == ("deny", "default")
    own = ApiKeyRecord(name="k", key_hash="h", prefix="sy-", training_use="allow")
    assert effective_training_use(own, teams, "deny") == ("allow", "key")


def test_the_cli_sets_consent_and_logs_each_change(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    create = ["--store", store_url, "create", "--name", "cli", "--team", "ml"]
    assert cli_main([*create, "--training-use", "redact"]) == 0
    key_id = re.search(r"id:\s+(\S+)", capsys.readouterr().out)
    assert key_id is not None
    kid = key_id.group(1)
    assert cli_main(["--store", store_url, "team", "ml", "--training-use", "deny"]) == 0
    assert cli_main(["--store", store_url, "consent", kid, "--training-use", "inherit"]) == 0
    assert cli_main(["--store", store_url, "teams"]) == 0
    assert "ml\tdeny" in capsys.readouterr().out
    record, _ = asyncio.run(_read(store_url, kid))
    assert record is not None and (record.team_id, record.training_use) == ("ml", None)
    assert cli_main(["--store", store_url, "consent", kid, "--no-team"]) == 0
    assert cli_main(["--store", store_url, "consent", "nope", "--no-team"]) == 1
    assert cli_main(["--store", store_url, "team", "bad name", "--training-use", "deny"]) == 2
    _, logged = asyncio.run(_read(store_url, kid))
    assert [(c.actor, c.action) for c in reversed(logged)] == [
        ("cli", "team.consent"),
        ("cli", "key.consent"),
        ("cli", "key.consent"),
    ]
    assert logged[0].detail["before"] == {"team_id": "ml", "training_use": None}
    assert logged[1].detail["before"] == {"team_id": "ml", "training_use": "redact"}


async def _read(url: str, key_id: str) -> tuple[ApiKeyRecord | None, list[ChangeRecord]]:
    backend = open_store(StoreConfig(url=url))
    await backend.connect()
    try:
        return await backend.get_api_key(key_id), await changes(backend)
    finally:
        await backend.close()
