"""Keys and budgets: create a key (its plaintext shown once, in the answer to the form, and
kept nowhere), revoke one, and each key's spend against its budget; each key's team and consent
(``training_use``: what its traffic may be trained on, its own or inherited from its team or the
config, and where it comes from), set per key, and each team's.

Spend is the store's ``spent_usd`` or, when higher, what this process has counted and not yet
flushed (:class:`gateway.auth.budget.BudgetGuard`); requests and cost in the window come from the
record. Creating, revoking and consent are the admin API's operations (:mod:`gateway.admin.
operations`, :mod:`gateway.admin.consent`), recorded in the change log with the operator.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.responses import RedirectResponse, Response

from gateway.admin import consent, operations
from gateway.auth.consent import effective_training_use
from gateway.console.figures import group_figures
from gateway.console.web import PREFIX, SECURITY_HEADERS, Ctx
from gateway.errors import InvalidRequestError
from traffic.store import TRAINING_USES, ApiKeyRecord, TeamRecord, TrainingUse

INHERIT = "inherit"  # the forms' choice for "no setting of its own"


def _optional(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def _use(value: str | None) -> str | None:
    """A form's training use: None for ``inherit`` or nothing."""
    value = _optional(value)
    return None if value == INHERIT else value


def spec_from(form: dict[str, str]) -> operations.KeyCreate:
    try:
        return operations.KeyCreate.model_validate(
            {
                "name": form.get("name", "").strip(),
                "rpm_limit": _optional(form.get("rpm_limit")),
                "tpm_limit": _optional(form.get("tpm_limit")),
                "budget_usd": _optional(form.get("budget_usd")),
                "team_id": _optional(form.get("team_id")),
                "training_use": _use(form.get("training_use")),
            }
        )
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid key: {exc}") from exc


def _row(
    ctx: Ctx,
    record: ApiKeyRecord,
    usage: dict[str | None, tuple[int, float]],
    teams: dict[str, TeamRecord],
) -> dict[str, Any]:
    spent = record.spent_usd
    if ctx.state.admission.budget is not None:
        spent = max(spent, ctx.state.admission.budget.spent(record.id))
    requests, cost = usage.get(record.id, (0, 0.0))
    budget = record.budget_usd
    training_use, source = effective_training_use(record, teams, _default(ctx))
    return {
        "record": record,
        "spent": spent,
        "used": min(1.0, spent / budget) if budget else None,
        "requests": requests,
        "cost": cost,
        "training_use": training_use,
        "source": source,
    }


def _default(ctx: Ctx) -> TrainingUse:
    return ctx.state.config.auth.training_use


async def keys_page(ctx: Ctx, created: dict[str, Any] | None = None) -> Response:
    window_name, window, _ = ctx.window()
    records = await operations.key_service(ctx.request).list()
    teams = {t.id: t for t in await consent.consent_service(ctx.request).teams()}
    usage = {
        r["group"]: (r["count"], r["cost_usd"])
        for r in await group_figures(ctx.store, window, "api_key_id", [])
    }
    newest = sorted(records, key=lambda r: r.created_at, reverse=True)
    rows = [_row(ctx, r, usage, teams) for r in newest]
    anonymous = usage.get(None)
    return ctx.render(
        "keys.html",
        status=201 if created else 200,
        page="keys",
        rows=rows,
        window=window_name,
        anonymous=anonymous,
        created=created,
        # every team with a setting or a key, and its setting (None: the default)
        teams=[
            (team, teams[team].training_use if team in teams else None)
            for team in sorted({*teams, *(r.team_id for r in records if r.team_id)})
        ],
        uses=TRAINING_USES,
        inherit=INHERIT,
        default_use=_default(ctx),
    )


async def create(ctx: Ctx) -> Response:
    spec = spec_from(ctx.form())
    record, plaintext = await operations.create(ctx.request, ctx.operator, spec)
    return await keys_page(ctx, {"record": record, "key": plaintext})


async def revoke(ctx: Ctx) -> Response:
    await operations.revoke(ctx.request, ctx.operator, ctx.request.path_params["key_id"])
    return RedirectResponse(f"{PREFIX}/keys", 303, SECURITY_HEADERS)


async def set_consent(ctx: Ctx) -> Response:
    """A key's team and its own training use, as the form gives both."""
    form = ctx.form()
    try:
        spec = consent.KeyConsent.model_validate(
            {
                "team_id": _optional(form.get("team_id")),
                "training_use": _use(form.get("training_use")),
            }
        )
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid consent: {exc}") from exc
    await consent.set_key_consent(
        ctx.request, ctx.operator, ctx.request.path_params["key_id"], spec
    )
    return RedirectResponse(f"{PREFIX}/keys", 303, SECURITY_HEADERS)


async def set_team(ctx: Ctx) -> Response:
    """A team's training use (the team is created if new)."""
    form = ctx.form()
    team_id = (form.get("team_id") or "").strip()
    try:
        spec = consent.TeamConsent.model_validate({"training_use": _use(form.get("training_use"))})
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid team: {exc}") from exc
    await consent.set_team_consent(ctx.request, ctx.operator, team_id, spec.training_use)
    return RedirectResponse(f"{PREFIX}/keys", 303, SECURITY_HEADERS)
