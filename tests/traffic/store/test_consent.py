"""Consent in the store: the setting stamped on an inference, a key's team and own setting, and
teams' settings, written and read back alike on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses

from traffic.store import ApiKeyRecord, StoreBackend, TeamRecord

from .scenario import day, inference


async def test_each_inference_keeps_the_consent_it_was_recorded_with(
    store_backend: StoreBackend,
) -> None:
    rows = [
        inference(day(1), api_key_id="k-allow", training_use="allow"),
        inference(day(2), api_key_id="k-redact", training_use="redact"),
        inference(day(3), api_key_id="k-deny", training_use="deny"),
        inference(day(4)),  # recorded without one
    ]
    await store_backend.insert_inferences(rows)
    read = [r.inference async for r in store_backend.iter_inferences()]
    assert read == rows
    assert [r.training_use for r in read] == ["allow", "redact", "deny", None]


async def test_a_keys_team_and_consent_are_set_and_cleared(store_backend: StoreBackend) -> None:
    key = ApiKeyRecord(name="ide", key_hash="a" * 64, prefix="sy-aaaaaa", team_id="platform")
    await store_backend.create_api_key(key)
    assert await store_backend.get_api_key_by_hash(key.key_hash) == key
    assert await store_backend.set_api_key_consent(key.id, team_id="ml", training_use="redact")
    changed = await store_backend.get_api_key(key.id)
    assert changed == dataclasses.replace(key, team_id="ml", training_use="redact")
    assert await store_backend.set_api_key_consent(key.id, team_id=None, training_use=None)
    assert await store_backend.get_api_key(key.id) == dataclasses.replace(key, team_id=None)
    assert not await store_backend.set_api_key_consent(
        "no-such-key", team_id=None, training_use=None
    )


async def test_teams_are_upserted_and_listed(store_backend: StoreBackend) -> None:
    assert await store_backend.get_team("platform") is None
    platform = TeamRecord(id="platform", created_at=day(1), training_use="deny")
    await store_backend.upsert_team(platform)
    await store_backend.upsert_team(TeamRecord(id="ml", created_at=day(2)))
    assert await store_backend.get_team("platform") == platform
    relaxed = dataclasses.replace(platform, training_use="redact")
    await store_backend.upsert_team(relaxed)
    assert await store_backend.list_teams() == [relaxed, TeamRecord(id="ml", created_at=day(2))]
