"""Replay a candidate routing state on recorded traffic, beside the current one (ops tool).

For every successful recorded request, ``router.replay`` asks each policy where it would have
gone and predicts the outcome (recorded verdicts, shadow verdicts, class means; see its
docstring). Both policies are the gateway config's ``routing`` (rules first, then the learned
decision), one with the current state file, one with the candidate's.

    python -m rl_loop.replay --config .cache/flywheel/switchyard.yaml \
        --state-file candidate.json [--store sqlite:///.cache/flywheel/traffic.db] [--json]

``--store`` defaults to the store the config records into (its ``store.url``). The report is a
table of at most 80 columns: each class's local share, acceptance, $ per 1k requests and p50
latency, the current policy beside the candidate.

Shadow verdicts come from the shadow rows' ``comparison.verdict`` (written by the RL loop's
backfill) and from the loop's verdict cache (``--verdicts``, default beside the state file).
Each item names the local weights behind its verdicts (``router.replay.ReplayItem``), so an
off-policy estimate can count only the weights that will serve (``router.ope``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from rl_loop.config import RefitConfig
from rl_loop.outcomes import (
    VerdictCache,
    features_of,
    iter_rows,
    shadow_verdict,
    verdict_of,
)
from router.config import RoutingConfig
from router.learned import LearnedPolicy, LearnedState, class_key
from router.policy import RoutingPolicy, RulePolicy
from router.replay import Arm, ArmReport, ReplayItem, ReplayReport, replay
from traffic.store import InferenceFilter, StoreBackend, StoreConfig, open_store

VERDICTS_FILE = "shadow_verdicts.json"


def config_store_url(config_path: Path) -> str:
    """The ``store.url`` of the gateway config at ``config_path`` (its default when unset),
    ``${VAR}`` expanded as the gateway expands it."""
    data = yaml.safe_load(config_path.read_text()) or {}
    url = (data.get("store") or {}).get("url", StoreConfig().url)
    return os.path.expandvars(str(url))


def load_routing(config_path: Path) -> tuple[RoutingConfig, dict[str, Arm]]:
    """The gateway config's routing section and the arm of each backend (vllm -> local)."""
    data = yaml.safe_load(config_path.read_text())
    routing = RoutingConfig.model_validate(data["routing"])
    arms: dict[str, Arm] = {
        name: "local" if spec.get("kind") == "vllm" else "frontier"
        for name, spec in data["backends"].items()
    }
    return routing, arms


def build_policy(
    routing: RoutingConfig, targets: Sequence[str], state: LearnedState | None
) -> RoutingPolicy:
    rules = RulePolicy(routing, targets)
    if routing.learned is None:
        return rules
    return LearnedPolicy(rules, routing.learned, state or LearnedState("unfitted"))


def read_state(path: Path | None) -> LearnedState | None:
    if path is None or not path.exists():
        return None
    return LearnedState.from_json(json.loads(path.read_text()))


async def replay_items(
    store: StoreBackend,
    arms: dict[str, Arm],
    class_tags: list[str],
    cache: VerdictCache,
    since: datetime | None = None,
    local_weights: str | None = None,
) -> list[ReplayItem]:
    """One item per successful recorded request served by a known arm, with the weights
    version of its local evidence: ``served_weights`` the row's ``weights_version`` when served
    local; its shadow verdict that of the last judged shadow answer of ``local_weights`` (its
    ``comparison["weights_version"]``) when it has one, else of the last judged shadow of any
    weights (as without ``local_weights``), ``shadow_weights`` saying whose it is."""
    items: list[ReplayItem] = []
    async for row in iter_rows(store, InferenceFilter(ok_only=True, since=since)):
        inf = row.inference
        arm = arms.get(inf.route_target)
        if arm is None:
            continue
        features = features_of(inf)
        shadow: bool | None = None
        shadow_weights: str | None = None
        for s in row.shadows:
            verdict = shadow_verdict(s, cache)
            recorded = s.comparison.get("weights_version")
            version = recorded if isinstance(recorded, str) else None
            chosen = local_weights is not None and shadow_weights == local_weights
            if verdict is not None and (version == local_weights or not chosen):
                shadow, shadow_weights = verdict, version
        items.append(
            ReplayItem(
                features=features,
                served_arm=arm,
                accepted=verdict_of(row),
                cost_usd=inf.cost_usd or 0.0,
                latency_ms=inf.latency_ms,
                shadow_accepted=shadow,
                class_key=class_key(features, class_tags),
                logged_local_p=inf.decision_propensity,
                served_weights=inf.weights_version if arm == "local" else None,
                shadow_weights=shadow_weights,
            )
        )
    return items


def report_json(report: ReplayReport) -> dict[str, Any]:
    return asdict(report)


_NAME_WIDTH = 18  # a longer class name gets a line of its own above its figures
_FIGURES_HEADER = f"{'local':>6}{'accept':>7}{'$/1k':>8}{'p50ms':>7}"


def _money(usd: float) -> str:
    if usd < 10:
        return f"{usd:.3f}"
    return f"{usd:.1f}" if usd < 1000 else f"{usd:,.0f}"


def _figures(report: ArmReport | None) -> str:
    if report is None:
        return f"{'-':>{len(_FIGURES_HEADER)}}"
    return (
        f"{report.local_share:>6.0%}{report.accept_rate:>7.3f}"
        f"{_money(report.cost_per_1k_usd):>8}{report.latency_p50_ms:>7.0f}"
    )


def format_reports(current: ReplayReport, candidate: ReplayReport) -> str:
    """Both reports side by side, per class, in at most 80 columns."""
    width = len(_FIGURES_HEADER)
    lines = [
        f"current policy:   {current.policy_version}",
        f"candidate policy: {candidate.policy_version}",
        f"{'':<{_NAME_WIDTH}}   {'current':^{width}}   {'candidate':^{width}}",
        f"{'class':<{_NAME_WIDTH}}   {_FIGURES_HEADER}   {_FIGURES_HEADER}",
    ]
    rows: list[tuple[str, ArmReport | None, ArmReport]] = [
        ("overall", current.overall, candidate.overall)
    ]
    rows += [
        (c, current.per_class.get(c), candidate.per_class[c]) for c in sorted(candidate.per_class)
    ]
    for name, a, b in rows:
        if len(name) > _NAME_WIDTH:
            lines.append(name)
            name = ""
        lines.append(f"{name:<{_NAME_WIDTH}}   {_figures(a)}   {_figures(b)}")
    return "\n".join(line.rstrip() for line in lines)


async def _main(args: argparse.Namespace) -> int:
    routing, arms = load_routing(args.config)
    current_file = args.current_state or (
        Path(routing.learned.state_file) if routing.learned and routing.learned.state_file else None
    )
    class_tags = list(RefitConfig().class_tags)  # report groups (routing reads no tags)
    verdicts = args.verdicts or args.state_file.parent / VERDICTS_FILE
    store = open_store(StoreConfig(url=args.store or config_store_url(args.config)))
    await store.connect()
    try:
        items = await replay_items(store, arms, class_tags, VerdictCache(verdicts), args.since)
    finally:
        await store.close()
    targets = list(arms)

    def arm_of(target: str) -> Arm:
        return arms[target]

    current = replay(build_policy(routing, targets, read_state(current_file)), items, arm_of)
    candidate = replay(build_policy(routing, targets, read_state(args.state_file)), items, arm_of)
    if args.json:
        print(json.dumps({"current": report_json(current), "candidate": report_json(candidate)}))
    else:
        print(f"{len(items)} recorded requests replayed")
        print(format_reports(current, candidate))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_loop.replay", description=__doc__)
    parser.add_argument("--store", default=None, help="Traffic store URL (default: the config's).")
    parser.add_argument("--state-file", type=Path, required=True, help="Candidate state JSON.")
    parser.add_argument("--config", type=Path, required=True, help="The gateway's YAML config.")
    parser.add_argument("--current-state", type=Path, default=None, help="Default: the config's.")
    parser.add_argument("--verdicts", type=Path, default=None, help="Shadow verdict cache JSON.")
    parser.add_argument("--since", type=datetime.fromisoformat, default=None)
    parser.add_argument("--json", action="store_true", help="Print both reports as JSON.")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
