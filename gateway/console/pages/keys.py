"""Keys and budgets: create a key (its plaintext shown once, in the answer to the form, and
kept nowhere), revoke one, and each key's spend against its budget.

Spend is the store's ``spent_usd`` or, when higher, what this process has counted and not yet
flushed (:class:`gateway.auth.budget.BudgetGuard`); requests and cost in the window come from the
record. Creating and revoking are the admin API's operations, recorded with the operator.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from starlette.responses import RedirectResponse, Response

from gateway.admin import operations
from gateway.console.figures import group_figures
from gateway.console.web import PREFIX, SECURITY_HEADERS, Ctx
from gateway.errors import InvalidRequestError
from traffic.store import ApiKeyRecord


def _optional(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


def spec_from(form: dict[str, str]) -> operations.KeyCreate:
    try:
        return operations.KeyCreate.model_validate(
            {
                "name": form.get("name", "").strip(),
                "rpm_limit": _optional(form.get("rpm_limit")),
                "tpm_limit": _optional(form.get("tpm_limit")),
                "budget_usd": _optional(form.get("budget_usd")),
            }
        )
    except ValidationError as exc:
        raise InvalidRequestError(f"invalid key: {exc}") from exc


def _row(
    ctx: Ctx, record: ApiKeyRecord, usage: dict[str | None, tuple[int, float]]
) -> dict[str, Any]:
    spent = record.spent_usd
    if ctx.state.admission.budget is not None:
        spent = max(spent, ctx.state.admission.budget.spent(record.id))
    requests, cost = usage.get(record.id, (0, 0.0))
    budget = record.budget_usd
    return {
        "record": record,
        "spent": spent,
        "used": min(1.0, spent / budget) if budget else None,
        "requests": requests,
        "cost": cost,
    }


async def keys_page(ctx: Ctx, created: dict[str, Any] | None = None) -> Response:
    window_name, window, _ = ctx.window()
    records = await operations.key_service(ctx.request).list()
    usage = {
        r["group"]: (r["count"], r["cost_usd"])
        for r in await group_figures(ctx.store, window, "api_key_id", [])
    }
    rows = [_row(ctx, r, usage) for r in sorted(records, key=lambda r: r.created_at, reverse=True)]
    anonymous = usage.get(None)
    return ctx.render(
        "keys.html",
        status=201 if created else 200,
        page="keys",
        rows=rows,
        window=window_name,
        anonymous=anonymous,
        created=created,
    )


async def create(ctx: Ctx) -> Response:
    spec = spec_from(ctx.form())
    record, plaintext = await operations.create(ctx.request, ctx.operator, spec)
    return await keys_page(ctx, {"record": record, "key": plaintext})


async def revoke(ctx: Ctx) -> Response:
    await operations.revoke(ctx.request, ctx.operator, ctx.request.path_params["key_id"])
    return RedirectResponse(f"{PREFIX}/keys", 303, SECURITY_HEADERS)
