"""Routing: the live policy; a change previewed on recorded traffic, applied as a canary on a
share of the requests, then promoted or rolled back; the history of those changes.

The editable settings are the ones ops tune: the candidate's version (recorded with every
decision it makes, so it must differ from the live one), the default target, the rules (YAML,
first match wins) and, for a learned policy, the quality target (which sets the scorer's
threshold), the exploration share, the minimum held-out verdicts and the scorer's state file (a
newly fitted scorer). Aliases and fallbacks are kept from the live policy.

Flow: ``POST /ui/routing/preview`` (htmx) replays live and candidate on the window's newest
successful exchanges (:mod:`gateway.console.replay_preview`) and answers the comparison as charts
and a per-class table, with the form that applies the very candidate it showed as a canary
(``POST /ui/routing/canary``); ``/pause`` and ``/resume`` hold it, ``/promote`` and
``/rollback`` end it. Each is the admin
API's own operation (:mod:`gateway.admin.operations`), recorded with the operator's name.

A promotion is kept in the store as the live release (:mod:`gateway.routing.release`): a
restart or SIGHUP reload serves it again while the file's routing is the one it was promoted
over. The page says so beside the button, and after a promotion
(``/ui/routing?promoted=<version>``) shows the promoted ``routing:`` section as YAML, to make it
the file's own.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict
from typing import Any
from urllib.parse import quote

import yaml
from pydantic import ValidationError
from starlette.responses import RedirectResponse, Response

from gateway.admin import operations
from gateway.console import charts
from gateway.console.figures import group_figures
from gateway.console.replay_preview import preview as run_preview
from gateway.console.web import PREFIX, SECURITY_HEADERS, Ctx
from gateway.errors import InvalidRequestError
from router.config import RoutingConfig
from router.learned import LearnedPolicy
from router.replay import Arm, ArmReport
from traffic.store.console_queries import changes, releases

METRICS = (
    ("local_share", "Local share", "pct"),
    ("accept_rate", "Accept rate", "pct"),
    ("cost_per_1k_usd", "Cost per 1k requests", "usd"),
    ("latency_p50_ms", "Latency p50", "ms"),
)
DEFAULT_CANARY_SHARE = 0.1


def next_version(version: str) -> str:
    """A new version for a candidate derived from ``version``: ``v1`` -> ``v1-c1`` -> ``v1-c2``."""
    match = re.fullmatch(r"(.*)-c(\d+)", version)
    return f"{match.group(1)}-c{int(match.group(2)) + 1}" if match else f"{version}-c1"


def form_values(routing: RoutingConfig) -> dict[str, Any]:
    """The edit form, filled from ``routing`` (a new version suggested)."""
    learned = routing.learned
    return {
        "version": next_version(routing.version),
        "default": routing.default,
        "rules": yaml.safe_dump(
            [r.model_dump(mode="json", exclude_none=True) for r in routing.rules], sort_keys=False
        )
        if routing.rules
        else "[]\n",
        "learned": learned is not None,
        "quality_target": learned.quality_target if learned else "",
        "exploration_share": learned.exploration_share if learned else "",
        "min_samples": learned.min_samples if learned else "",
        "state_file": (learned.state_file or "") if learned else "",
    }


def candidate_from(live: RoutingConfig, form: dict[str, str]) -> RoutingConfig:
    """The candidate routing the form describes (400 with the reason when it is invalid)."""
    try:
        rules = yaml.safe_load(form.get("rules") or "[]") or []
        data = live.model_dump(mode="json")
        data.update(version=form.get("version", "").strip(), default=form.get("default", ""))
        data["rules"] = rules
        if data.get("learned") is not None:
            data["learned"].update(
                quality_target=float(form["quality_target"]),
                exploration_share=float(form["exploration_share"]),
                min_samples=int(form["min_samples"]),
                state_file=form.get("state_file", "").strip() or None,
            )
        candidate = RoutingConfig.model_validate(data)
    except (yaml.YAMLError, KeyError, ValueError, TypeError) as exc:
        raise InvalidRequestError(f"invalid routing change: {exc}") from exc
    if not candidate.version or candidate.version == live.version:
        raise InvalidRequestError(
            f"give the candidate a version other than the live one ({live.version}): "
            "its decisions are recorded under it"
        )
    return candidate


def _live_view(ctx: Ctx) -> dict[str, Any]:
    policy = ctx.state.routing.policy
    view: dict[str, Any] = {"version": policy.version}
    if isinstance(policy, LearnedPolicy):
        scorer = policy.state.scorer
        view.update(
            state_version=policy.state.version,
            scorer_version=scorer.version if scorer else None,
            calibration=sum(len(p.scores) for p in policy.state.calibration.values()),
            segments=[
                {
                    "name": name,
                    "threshold": None if math.isinf(cut.threshold) else cut.threshold,
                    "exploration_share": cut.exploration_share,
                    "samples": cut.samples,
                    "n_eff": cut.n_eff,
                    "local_share": cut.local_share,
                    "routed_lower": cut.routed_lower,
                }
                for name, cut in policy.plans.items()
            ],
        )
    return view


def _arms(ctx: Ctx) -> dict[str, Arm]:
    return {
        name: "local" if b.kind == "vllm" else "frontier"
        for name, b in ctx.state.config.backends.items()
    }


async def routing_page(ctx: Ctx) -> Response:
    live = ctx.state.config.routing
    window_name, window, _ = ctx.window()
    history = []
    recent_releases = []
    by_policy: list[dict[str, Any]] = []
    if ctx.handle is not None:
        history = await changes(ctx.store, action_prefix="routing.", limit=15)
        recent_releases = await releases(ctx.store, limit=10)
        by_policy = await group_figures(ctx.store, window, "policy_version", ctx.local_targets())
    canary = ctx.state.decider.canary
    promoted = ctx.param("promoted")
    return ctx.render(
        "routing.html",
        promoted=promoted if promoted == ctx.state.routing.policy.version else None,
        live_yaml=yaml.safe_dump({"routing": live.model_dump(mode="json")}, sort_keys=False),
        config_path=str(ctx.state.config_path) if ctx.state.config_path else None,
        fleet_shared=ctx.state.reloader.fleet.shared,
        page="routing",
        live=live,
        live_view=_live_view(ctx),
        canary=canary,
        release=release_view(ctx),
        form=form_values(live),
        targets=sorted(ctx.state.config.backends),
        history=history,
        releases=recent_releases,
        by_policy=by_policy,
        window=window_name,
        default_share=DEFAULT_CANARY_SHARE,
    )


def release_view(ctx: Ctx) -> dict[str, Any] | None:
    """The running canary's sequential test (gateway.routing.release_monitor): each arm's
    accept rate on the requests the arms decided differently, with its anytime-valid band, the
    difference's bounds, and the next decision with its reason."""
    canary = ctx.state.decider.canary
    monitor = ctx.state.release_monitor
    if canary is None or monitor is None:
        return None
    cfg = monitor.config
    margin = cfg.margin
    view: dict[str, Any] = {"enabled": cfg.enabled, "auto_promote": cfg.auto_promote}
    test = monitor.test(canary.routing.version)
    if not cfg.enabled:
        return {**view, "next": "off", "why": "the release monitor is off (release.enabled)"}
    if test is None or test.n == 0:
        why = "no verdict yet on a request the two arms decided differently"
        return {**view, "next": "continue", "why": why, "n": 0, "arms": []}
    arms = []
    for name, arm in (("candidate", test.candidate), ("live", test.live)):
        low, high = arm.interval()
        rate = arm.accepted / arm.n if arm.n else None
        arms.append({"name": name, "n": arm.n, "rate": rate, "low": low, "high": high})
    low, high = test.bounds()
    decided = test.decide()
    if decided == "promote":
        then = "promoted automatically" if cfg.auto_promote else "promote it by hand"
        why = f"candidate - live >= {low:+.3f}, above -{margin}: {then}"
    elif decided == "rollback":
        why = f"candidate - live <= {high:+.3f}, under -{margin}, or {test.max_n} verdicts"
    else:
        why = (
            f"candidate - live in [{low:+.3f}, {high:+.3f}]: promote once the lower bound clears "
            f"-{margin}; roll back if the upper falls under it, or at {test.max_n} verdicts "
            f"({test.n} so far)"
        )
    return {**view, "next": decided, "why": why, "n": test.n, "arms": arms, "delta": [low, high]}


def _report_view(report: ArmReport) -> dict[str, Any]:
    return asdict(report)


async def preview(ctx: Ctx) -> Response:
    live = ctx.state.config.routing
    candidate = candidate_from(live, ctx.form())
    policy = await operations.candidate_policy(ctx.state, candidate)
    window_name, window, _ = ctx.window()
    result = await run_preview(
        ctx.store,
        window,
        ctx.config.replay_sample,
        _arms(ctx),
        ctx.config.class_tag,
        ctx.state.routing.policy,
        policy,
    )
    names = ("live " + result.live.policy_version, "candidate " + result.candidate.policy_version)
    chart_specs = [
        charts.bars(
            [label],
            {
                names[0]: [getattr(result.live.overall, key)],
                names[1]: [getattr(result.candidate.overall, key)],
            },
            label,
            fmt,  # type: ignore[arg-type]  # one of charts.YFormat
        )
        for key, label, fmt in METRICS
    ]
    classes = sorted(set(result.live.per_class) | set(result.candidate.per_class))
    per_class = [
        (c, result.live.per_class.get(c), result.candidate.per_class.get(c)) for c in classes
    ]
    return ctx.render(
        "fragments/preview.html",
        result=result,
        live_overall=_report_view(result.live.overall),
        candidate_overall=_report_view(result.candidate.overall),
        charts=chart_specs,
        per_class=per_class,
        candidate=candidate,
        candidate_json=candidate.model_dump_json(),
        window=window_name,
        default_share=DEFAULT_CANARY_SHARE,
    )


def _back() -> Response:
    return RedirectResponse(f"{PREFIX}/routing", 303, SECURITY_HEADERS)


async def canary(ctx: Ctx) -> Response:
    form = ctx.form()
    try:
        candidate = RoutingConfig.model_validate_json(form.get("candidate", ""))
        share = float(form.get("share", ""))
    except (ValidationError, ValueError) as exc:
        raise InvalidRequestError(f"invalid canary: {exc}") from exc
    if not 0 < share <= 1:
        raise InvalidRequestError("the canary's share must be in (0, 1]")
    await operations.start_canary(ctx.request, ctx.operator, candidate, share)
    return _back()


async def promote(ctx: Ctx) -> Response:
    version = await operations.promote(ctx.request, ctx.operator)
    return RedirectResponse(
        f"{PREFIX}/routing?promoted={quote(version, safe='')}", 303, SECURITY_HEADERS
    )


async def rollback(ctx: Ctx) -> Response:
    await operations.drop(ctx.request, ctx.operator)
    return _back()


async def pause(ctx: Ctx) -> Response:
    await operations.restage(ctx.state, ctx.handle, ctx.operator, "pause")
    return _back()


async def resume(ctx: Ctx) -> Response:
    await operations.restage(ctx.state, ctx.handle, ctx.operator, "resume")
    return _back()
