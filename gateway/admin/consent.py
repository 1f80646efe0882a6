"""The consent levers (a key's team and ``training_use``, a team's), for the admin API and the
console; each change is applied, refused at once by this process's key cache, and logged.

- :func:`set_key_consent`: ``PATCH /admin/keys/{id}`` (:class:`KeyConsent`: only the fields
  given change; null clears one), the console's per-key form; change log ``key.consent``;
- :func:`set_team_consent`: ``PUT /admin/teams/{id}`` (:class:`TeamConsent`), the console's team
  form; change log ``team.consent``.

Each change-log entry holds the setting before and after. Other gateway processes take a change
within ``auth.cache_ttl_s`` and one store read, as a revocation (:mod:`gateway.auth.consent`).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request

from gateway.admin import changes
from gateway.admin.operations import recorder
from gateway.auth.consent import TEAM_ID_PATTERN, ConsentService, stored_training_use
from gateway.errors import InvalidRequestError, NotFoundError
from gateway.state import GatewayState
from traffic.store import ApiKeyRecord, TeamRecord, TrainingUse

TRAINING_USE_DESCRIPTION = (
    "What this key's (or team's) recorded traffic may be used for in training: allow, redact "
    "(only with secrets and PII replaced), deny (never); null: inherited (a key takes its "
    "team's, a team the gateway's auth.training_use)."
)


class KeyConsent(BaseModel):
    """``PATCH /admin/keys/{key_id}``: the fields given change, the others stay."""

    model_config = ConfigDict(extra="forbid")

    team_id: str | None = Field(
        default=None, pattern=TEAM_ID_PATTERN, description="The key's team; null: none."
    )
    training_use: TrainingUse | None = Field(default=None, description=TRAINING_USE_DESCRIPTION)


class TeamConsent(BaseModel):
    """``PUT /admin/teams/{team_id}``: the team's setting (the team is created if new)."""

    model_config = ConfigDict(extra="forbid")

    training_use: TrainingUse | None = Field(description=TRAINING_USE_DESCRIPTION)


def consent_service(request: Request) -> ConsentService:
    """The store's consent settings (404 when the store is off)."""
    return ConsentService(recorder(request).backend)


def _invalidate(request: Request, key_ids: list[str]) -> None:
    """This process reads the keys again on their next call (their consent changed)."""
    state: GatewayState = request.app.state.switchyard
    authenticator = state.admission.authenticator
    if authenticator is not None:
        for key_id in key_ids:
            authenticator.invalidate(key_id)


async def set_key_consent(
    request: Request, actor: str, key_id: str, spec: KeyConsent
) -> ApiKeyRecord:
    """Change key ``key_id``'s team and/or own setting as ``spec`` gives them (404: unknown)."""
    service = consent_service(request)
    found = await recorder(request).backend.get_api_key(key_id)
    if found is None:
        raise NotFoundError(f"no key {key_id}")
    given = spec.model_fields_set
    team_id = spec.team_id if "team_id" in given else found.team_id
    own = stored_training_use(found.training_use)
    training_use = spec.training_use if "training_use" in given else own
    try:
        record = await service.set_key(key_id, team_id=team_id, training_use=training_use)
    except ValueError as exc:
        raise InvalidRequestError(f"invalid consent: {exc}") from exc
    if record is None:
        raise NotFoundError(f"no key {key_id}")
    _invalidate(request, [key_id])
    detail = {
        "team_id": record.team_id,
        "training_use": record.training_use,
        "before": {"team_id": found.team_id, "training_use": found.training_use},
    }
    await changes.record(request.app.state.recorder, actor, "key.consent", key_id, detail)
    return record


async def set_team_consent(
    request: Request, actor: str, team_id: str, training_use: TrainingUse | None
) -> TeamRecord:
    """Set team ``team_id``'s setting (created if new); its keys take it at their next read."""
    backend = recorder(request).backend
    before = await backend.get_team(team_id)
    try:
        team = await consent_service(request).set_team(team_id, training_use)
    except ValueError as exc:
        raise InvalidRequestError(f"invalid team: {exc}") from exc
    members = [k.id for k in await backend.list_api_keys() if k.team_id == team_id]
    _invalidate(request, members)
    detail = {
        "training_use": training_use,
        "before": before.training_use if before is not None else None,
        "keys": len(members),
    }
    await changes.record(request.app.state.recorder, actor, "team.consent", team_id, detail)
    return team
