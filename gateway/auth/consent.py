"""Consent to train on a key's traffic: ``training_use`` per key, per team, and a default.

The setting a call's record is stamped with, first that is set:

    the key's own ``training_use``  ->  its team's (``team`` table)  ->  ``auth.training_use``

``allow`` (trained on as recorded), ``redact`` (only after :mod:`traffic.scrub` replaced its
secrets and PII), ``deny`` (never in a dataset); what the exporters do with each is
:mod:`traffic.export.consent`'s. The key's and its team's settings are read with the key
(:class:`~gateway.auth.keys.Authenticator`, one more store read only for a key that has a team
and no setting of its own) and carried by its :class:`~gateway.auth.keys.Principal`; the
default is applied where the record is stamped, so a reloaded default applies at once. A
change takes effect as a revocation does: within ``cache_ttl_s`` and one store read.

A stored value this code does not know (a newer release wrote it) is read as ``deny``: consent
fails closed. :class:`ConsentService` sets keys' and teams' settings (the admin operations,
:mod:`gateway.admin.consent`, and ``switchyard keys``).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Final, Literal, cast

from traffic.store.backend import StoreBackend
from traffic.store.records import TRAINING_USES, ApiKeyRecord, TeamRecord, TrainingUse

TEAM_ID_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_TEAM_ID: Final = re.compile(TEAM_ID_PATTERN)
UNKNOWN_READS_AS: Final[TrainingUse] = "deny"

Source = Literal["key", "team", "default"]


def check_consent(team_id: str | None, training_use: str | None) -> None:
    """ValueError unless ``team_id`` is a team name (letters, digits, ``._-``, at most 64) and
    ``training_use`` one of allow / redact / deny (either may be None)."""
    if team_id is not None and not _TEAM_ID.match(team_id):
        raise ValueError(
            f"a team is 1-64 letters, digits, '.', '_' or '-' (starting with a letter or digit), "
            f"got {team_id!r}"
        )
    if training_use is not None and training_use not in TRAINING_USES:
        raise ValueError(f"training_use must be one of {TRAINING_USES}, got {training_use!r}")


def stored_training_use(value: str | None) -> TrainingUse | None:
    """A stored setting as consent: None stays None (not set), an unknown value is ``deny``."""
    if value is None:
        return None
    return cast(TrainingUse, value) if value in TRAINING_USES else UNKNOWN_READS_AS


async def inherited_training_use(
    store: StoreBackend, record: ApiKeyRecord | None
) -> TrainingUse | None:
    """The consent of ``record``'s calls: its own, else its team's (read now), else None (the
    config's default applies)."""
    if record is None:
        return None
    own = stored_training_use(record.training_use)
    if own is not None or record.team_id is None:
        return own
    team = await store.get_team(record.team_id)
    return stored_training_use(team.training_use) if team is not None else None


def effective_training_use(
    record: ApiKeyRecord, teams: dict[str, TeamRecord], default: TrainingUse
) -> tuple[TrainingUse, Source]:
    """What ``record``'s calls are stamped with, and where it comes from (for listings)."""
    own = stored_training_use(record.training_use)
    if own is not None:
        return own, "key"
    team = teams.get(record.team_id) if record.team_id is not None else None
    inherited = stored_training_use(team.training_use) if team is not None else None
    if inherited is not None:
        return inherited, "team"
    return default, "default"


class ConsentService:
    """Set keys' teams and consent, and teams' consent, in a :class:`StoreBackend`."""

    def __init__(self, store: StoreBackend) -> None:
        self._store = store

    async def set_key(
        self, key_id: str, *, team_id: str | None, training_use: TrainingUse | None
    ) -> ApiKeyRecord | None:
        """Give key ``key_id`` this team and own setting (None clears either); its record as
        it is now, or None for an unknown key."""
        check_consent(team_id, training_use)
        if not await self._store.set_api_key_consent(
            key_id, team_id=team_id, training_use=training_use
        ):
            return None
        return await self._store.get_api_key(key_id)

    async def set_team(self, team_id: str, training_use: TrainingUse | None) -> TeamRecord:
        """Set team ``team_id``'s setting (None: its keys take the config's default), creating
        the team if it has no row yet."""
        check_consent(team_id, training_use)
        found = await self._store.get_team(team_id)
        team = (
            replace(found, training_use=training_use)
            if found is not None
            else TeamRecord(id=team_id, training_use=training_use)
        )
        await self._store.upsert_team(team)
        return team

    async def teams(self) -> list[TeamRecord]:
        return await self._store.list_teams()
