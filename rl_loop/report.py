"""What a flywheel run measured, from the traffic record: per round and per class, the local
share, accept rates (local, frontier, overall), cost per 1k requests and latency p50; the
targets checked against those figures; and a PNG of the curves.

Definitions (one round = the requests recorded in its traffic window):
- local share: requests whose route target is the local model / all requests;
- accept rate: accepted / (accepted + rejected) by user feedback, per arm and overall;
- cost per 1k requests: 1000 x mean recorded ``cost_usd`` (0 when unknown);
- latency p50: median of the gateway-measured latency (ms);
- cost per 1k re-weighted to a mix: sum over classes of weight x the class's cost per 1k, which
  removes the round-to-round noise of how many tasks of each class were drawn and shows what the
  same per-class figures give under another traffic mix.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rl_loop.agent_report import (
    AgentRoundFigures,
    format_agent_table,
    plot_agent_curves,
)
from rl_loop.outcomes import verdict_of
from traffic.store import InferenceFilter, StoreBackend


@dataclass(slots=True)
class Figures:
    requests: int = 0
    local: int = 0
    failed: int = 0
    accepted_local: int = 0
    judged_local: int = 0
    accepted_frontier: int = 0
    judged_frontier: int = 0
    cost_usd: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    def add(self, other: Figures) -> None:
        for name in (
            "requests",
            "local",
            "failed",
            "accepted_local",
            "judged_local",
            "accepted_frontier",
            "judged_frontier",
            "cost_usd",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies_ms += other.latencies_ms

    def view(self) -> dict[str, Any]:
        judged = self.judged_local + self.judged_frontier
        return {
            "requests": self.requests,
            "local_share": _ratio(self.local, self.requests),
            "accept_local": _ratio(self.accepted_local, self.judged_local),
            "accept_frontier": _ratio(self.accepted_frontier, self.judged_frontier),
            "accept_overall": _ratio(self.accepted_local + self.accepted_frontier, judged),
            "cost_per_1k_usd": 1000 * self.cost_usd / self.requests if self.requests else None,
            "latency_p50_ms": statistics.median(self.latencies_ms) if self.latencies_ms else None,
            "failed": self.failed,
            "judged_local": self.judged_local,
            "judged_frontier": self.judged_frontier,
        }


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


async def window_figures(
    store: StoreBackend,
    since: datetime,
    until: datetime,
    *,
    local_target: str = "local",
    class_tag: str = "family",
) -> dict[str, Figures]:
    """Figures per class of the requests recorded in ``[since, until)``."""
    out: dict[str, Figures] = defaultdict(Figures)
    async for row in store.iter_inferences(InferenceFilter(since=since, until=until)):
        inf = row.inference
        f = out[inf.tags.get(class_tag, "*")]
        f.requests += 1
        if not inf.ok:
            f.failed += 1
            continue
        is_local = inf.route_target == local_target
        f.local += is_local
        f.cost_usd += inf.cost_usd or 0.0
        f.latencies_ms.append(inf.latency_ms)
        verdict = verdict_of(row)
        if verdict is None:
            continue
        if is_local:
            f.judged_local += 1
            f.accepted_local += verdict
        else:
            f.judged_frontier += 1
            f.accepted_frontier += verdict
    return dict(out)


def group(figures: Mapping[str, Figures], classes: Iterable[str] | None = None) -> Figures:
    total = Figures()
    for name, f in figures.items():
        if classes is None or name in classes:
            total.add(f)
    return total


@dataclass(slots=True)
class RoundFigures:
    round: int
    served: str
    policy: str
    overall: dict[str, Any]
    learnable: dict[str, Any]
    beyond: dict[str, Any]
    classes: dict[str, dict[str, Any]]
    client_errors: int
    swap_traffic: dict[str, Any] = field(default_factory=dict)
    ope: dict[str, Any] = field(default_factory=dict)  # rl_loop.ope_check, after the refit
    # rl_loop.release_stage: the round's release (status, who decided, each arm's verdicts on
    # the requests they could answer differently, the canary's harm) and, in the round of the
    # injected bad candidate, what made it known worse
    release: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def round_figures(
    round_index: int,
    served: str,
    policy: str,
    figures: Mapping[str, Figures],
    learnable: Sequence[str],
    client_errors: int,
) -> RoundFigures:
    beyond = [c for c in figures if c not in learnable]
    return RoundFigures(
        round=round_index,
        served=served,
        policy=policy,
        overall=group(figures).view(),
        learnable=group(figures, learnable).view(),
        beyond=group(figures, beyond).view(),
        classes={c: f.view() for c, f in sorted(figures.items())},
        client_errors=client_errors,
    )


def _get(d: Mapping[str, Any], key: str) -> float:
    value = d.get(key)
    return float(value) if value is not None else 0.0


def mix_cost_per_1k(figures: RoundFigures, weights: Mapping[str, float]) -> float | None:
    """Cost per 1k requests had the round's classes come in the proportions ``weights``."""
    total = 0.0
    for name, weight in weights.items():
        cost = figures.classes.get(name, {}).get("cost_per_1k_usd")
        if cost is None:
            return None  # a class of the mix was not seen this round
        total += weight * cost
    return total


def check_targets(
    rounds: Sequence[RoundFigures],
    learnable: Sequence[str],
    exploration_share: float,
    swap_failures: int,
    mixes: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Any]:
    """The run's targets, each with the measured figures and whether it was met.

    ``mixes`` (name -> class weights) adds the cost drop re-weighted to each mix, for reading
    (the target is judged on the cost as measured).
    """
    first, last = rounds[0], rounds[-1]
    frontier_only = _get(first.overall, "accept_frontier") or _get(first.overall, "accept_overall")
    out: dict[str, Any] = {}
    per_class: dict[str, Any] = {}
    for name in learnable:
        c = last.classes.get(name, {})
        base = first.classes.get(name, {})
        front = _get(base, "accept_frontier") or frontier_only
        share, acc = _get(c, "local_share"), c.get("accept_local")
        per_class[name] = {
            "local_share_first": base.get("local_share"),
            "local_share_last": share,
            "accept_local_last": acc,
            "frontier_accept": front,
            "met": share >= 0.8 and acc is not None and acc >= 0.95 * front,
        }
    out["learnable_local_share_and_quality"] = per_class
    learned = [n for n, v in per_class.items() if v["met"]]
    out["learnable_classes_met"] = f"{len(learned)}/{len(learnable)}"
    overall = _get(last.overall, "accept_overall")
    out["overall_accept_vs_frontier_only"] = {
        "frontier_only": frontier_only,
        "last": overall,
        "met": overall >= 0.95 * frontier_only,
    }
    c0, c1 = _get(first.overall, "cost_per_1k_usd"), _get(last.overall, "cost_per_1k_usd")
    out["cost_per_1k_drop"] = {
        "first": c0,
        "last": c1,
        "drop": 1 - c1 / c0 if c0 else None,
        "met": bool(c0) and c1 <= 0.5 * c0,
    }
    by_mix: dict[str, Any] = {}
    for name, weights in (mixes or {}).items():
        m0, m1 = mix_cost_per_1k(first, weights), mix_cost_per_1k(last, weights)
        drop = 1 - m1 / m0 if m0 and m1 is not None else None
        by_mix[name] = {"first": m0, "last": m1, "drop": drop}
    if by_mix:
        out["cost_per_1k_drop_reweighted"] = by_mix
    ratios = [_get(r.overall, "accept_overall") / frontier_only for r in rounds]
    out["overall_accept_every_round"] = {
        "ratio_per_round": [round(x, 4) for x in ratios],
        "min": min(ratios),
        "met": min(ratios) >= 0.95,
    }
    shares = [_get(r.beyond, "local_share") for r in rounds]
    bounds = [beyond_bound(exploration_share, int(r.beyond.get("requests") or 0)) for r in rounds]
    out["beyond_local_share_every_round"] = {
        "per_round": shares,
        "bound_per_round": [round(b, 4) for b in bounds],
        "met": all(s <= b for s, b in zip(shares, bounds, strict=True)),
    }
    # Sampling noise: a few hundred requests put a 5% share anywhere in about 2-9%.
    out["beyond_local_share_at_exploration"] = {
        "per_round": shares,
        "exploration_share": exploration_share,
        "met": max(shares) <= exploration_share * 2 + 0.02,
    }
    client_errors = sum(r.client_errors for r in rounds) + swap_failures
    out["zero_failed_client_requests"] = {"failed": client_errors, "met": client_errors == 0}
    released = [r.release for r in rounds if r.release]
    if released:
        out.update(release_targets(released))
    return out


def release_targets(released: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The releases' targets: the canary's harm (share x live's accept minus the candidate's on
    the requests the arms could answer differently) at most 0.01 in every round that released,
    and the injected bad candidate rolled back within its round."""
    harms = [r.get("figures", {}).get("harm") for r in released]
    measured = [h for h in harms if h is not None]
    out: dict[str, Any] = {
        "canary_harm_every_round": {
            "per_release": harms,
            "max": max(measured) if measured else None,
            "met": bool(measured) and max(measured) <= 0.01,
        },
        "releases": [
            {k: r.get(k) for k in ("round", "status", "decided_by", "timed_out", "injected")}
            for r in released
        ],
    }
    injected = [r for r in released if r.get("injected")]
    if injected:
        out["injected_bad_candidate_rolled_back"] = {
            "status": [r.get("status") for r in injected],
            "decided_by": [r.get("decided_by") for r in injected],
            "met": all(caught(r) for r in injected),
        }
    return out


def caught(release: Mapping[str, Any]) -> bool:
    """A release rolled back on evidence: by the gateway's sequential test, or by the shadow
    stage's gate (``rl_loop.shadow_gate``), not by the loop when its traffic ran out undecided."""
    if release.get("status") != "rolled_back":
        return False
    return release.get("decided_by") == "release-monitor" or bool(
        (release.get("shadow") or {}).get("regressions")
    )


def beyond_bound(exploration_share: float, requests: int) -> float:
    """The most a round's beyond-model families may go local: the exploration share plus 3
    binomial standard deviations at the round's count of their requests."""
    if requests <= 0:
        return 1.0
    e = exploration_share
    return e + 3 * math.sqrt(e * (1 - e) / requests)


def plot_curves(rounds: Sequence[RoundFigures], path: Path) -> None:
    """Four panels over rounds: local share, accept rate, cost per 1k, latency p50."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r.round for r in rounds]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=100)
    panels = [
        ("local_share", "local share"),
        ("accept_overall", "accept rate"),
        ("cost_per_1k_usd", "cost per 1k requests (USD)"),
        ("latency_p50_ms", "latency p50 (ms)"),
    ]
    classes = sorted({c for r in rounds for c in r.classes})
    for ax, (key, title) in zip(axes.flat, panels, strict=True):
        for name in classes:
            ys = [r.classes.get(name, {}).get(key) for r in rounds]
            ax.plot(
                xs,
                [float("nan") if y is None else y for y in ys],
                alpha=0.45,
                lw=1,
                marker=".",
                label=name,
            )
        for label, style in (("overall", "k-"), ("learnable", "g--"), ("beyond", "r--")):
            ys = [getattr(r, label).get(key) for r in rounds]
            ax.plot(
                xs,
                [float("nan") if y is None else y for y in ys],
                style,
                lw=2.2,
                marker="o",
                label=label,
            )
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7, ncol=2)
    fig.suptitle("Switchyard flywheel: traffic -> record -> train -> gate -> swap -> refit")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def format_table(rounds: Sequence[RoundFigures]) -> str:
    lines = [
        f"{'round':<6}{'class':<24}{'req':>5}{'local':>7}{'acc_loc':>8}{'acc_fr':>8}"
        f"{'acc_all':>8}{'$/1k':>8}{'p50ms':>8}"
    ]

    def cell(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    for r in rounds:
        rows = [
            *r.classes.items(),
            ("[learnable]", r.learnable),
            ("[beyond]", r.beyond),
            ("[overall]", r.overall),
        ]
        for name, v in rows:
            lines.append(
                f"{r.round:<6}{name:<24}{v['requests']:>5}{cell(v['local_share'], '.0%'):>7}"
                f"{cell(v['accept_local'], '.3f'):>8}{cell(v['accept_frontier'], '.3f'):>8}"
                f"{cell(v['accept_overall'], '.3f'):>8}{cell(v['cost_per_1k_usd'], '.3f'):>8}"
                f"{cell(v['latency_p50_ms'], '.0f'):>8}"
            )
    return "\n".join(lines)


def write_report(
    header: dict[str, Any],
    figures: Sequence[RoundFigures],
    loop_results: Sequence[dict[str, Any]],
    targets: dict[str, Any],
    folders: Sequence[Path],
    wall_s: float,
    agent: Sequence[AgentRoundFigures] = (),
) -> dict[str, Any]:
    """Write ``report.json``, ``report.txt`` and ``curves.png`` (and ``agent_curves.png`` with
    ``agent`` rounds, ``rl_loop.agent_report``) into each folder, print the tables and return
    the one-line summary."""
    report = {
        **header,
        "wall_s": round(wall_s, 1),
        "rounds": [f.to_json() for f in figures],
        "agent_rounds": [a.to_json() for a in agent],
        "loop": list(loop_results),
        "targets": targets,
    }
    lines = [format_table(figures)]
    if agent:
        lines += ["", "agent episodes:", format_agent_table(agent)]
    lines += ["", "targets:"]
    lines += [f"  {name}: {json.dumps(value)}" for name, value in targets.items()]
    text = "\n".join(lines)
    for where in folders:
        (where / "report.json").write_text(json.dumps(report, indent=2, default=str))
        (where / "report.txt").write_text(text + "\n")
        plot_curves(figures, where / "curves.png")
        if agent:
            plot_agent_curves(agent, where / "agent_curves.png")
    print(text)
    return {
        "preset": header.get("preset"),
        "seed": header.get("seed"),
        "rounds": len(figures) - 1,
        "wall_s": round(wall_s, 1),
        "local_share": [f.overall["local_share"] for f in figures],
        "learnable_local_share": [f.learnable["local_share"] for f in figures],
        "beyond_local_share": [f.beyond["local_share"] for f in figures],
        "accept_overall": [f.overall["accept_overall"] for f in figures],
        "cost_per_1k_usd": [f.overall["cost_per_1k_usd"] for f in figures],
        "latency_p50_ms": [f.overall["latency_p50_ms"] for f in figures],
        "cost_drop": targets["cost_per_1k_drop"]["drop"],
        "cost_drop_reweighted": {
            name: value["drop"]
            for name, value in targets.get("cost_per_1k_drop_reweighted", {}).items()
        },
        "frontier_only_accept": targets["overall_accept_vs_frontier_only"]["frontier_only"],
        "learnable_met": targets["learnable_classes_met"],
        "failed_requests": targets["zero_failed_client_requests"]["failed"],
        "promoted": [r.get("promoted") for r in loop_results],
        "agent": agent_summary(agent),
        "report": str(Path(folders[-1]) / "report.json"),
    }


def agent_summary(agent: Sequence[AgentRoundFigures]) -> dict[str, Any] | None:
    """The agent rounds' curves for the one-line summary (None without agent rounds)."""
    if not agent:
        return None
    return {
        "episodes": [a.episodes for a in agent],
        "success_frontier_only": [a.success["frontier"]["success"] for a in agent],
        "success_paired_frontier_only": [a.paired_frontier.get("success") for a in agent],
        "success_with_local": [a.success["with_local"]["success"] for a in agent],
        "success_overall": [a.success["overall"]["success"] for a in agent],
        "local_share": [a.local_share for a in agent],
        "local_validity": [a.local_validity for a in agent],
        "cost_per_episode_usd": [a.cost_per_episode_usd for a in agent],
        "failed_requests": sum(int(a.client.get("failed_requests", 0)) for a in agent),
        "gate": [a.gate.get("decision") for a in agent if a.gate],
    }
