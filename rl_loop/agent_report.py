"""The flywheel's agent figures, from the traffic record: per round, the agent episodes the
workload ran through the gateway, rebuilt from their turns (``traffic.export.episodes``).

Definitions (one round = the episodes whose ids the driver names, all rows of each):
- served by: ``frontier`` when every step of the episode went to a frontier target, ``local``
  when every step went to the local model, ``mixed`` otherwise (a route target is local when it
  is one of ``local_targets``); ``with_local`` = local + mixed;
- success: accepted / judged by the episode's verdict (the feedback the agent client posts with
  the verifier's verdict), per served-by group, overall, and per task kind;
- local share of agent steps: steps whose route target is local / all steps;
- tool-call validity of local steps: valid calls / calls made by local steps (the record's own
  check: a tool offered, a JSON object of arguments, the tool's schema); ``None`` when the local
  steps made no call (then ``local_steps_without_call`` says how many answered in text);
- cost per episode: mean over episodes of the sum of the steps' recorded ``cost_usd``;
- paired frontier-only success (``paired_frontier``, set by the driver): the same episodes (same
  tasks, APIs and streaming) played by the same client straight against the frontier provider,
  judged by the same verifier. The frontier's play is a function of the task, so this is the
  frontier-only policy's success on exactly this round's episodes. The success target compares
  each round with it; against round 0's frontier success (other episodes) the spread of 20
  Bernoulli(0.9) episodes alone (sd 0.067) falls under 0.95x in about a third of rounds, so
  that ratio is kept beside it, labelled, for reading.

The task kind of each episode is the driver's bookkeeping (``kinds``: episode id -> kind), as
the chat report's classes are the client's labels; the gateway never saw it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from traffic.export.episode_export import episodes_from_store
from traffic.export.episodes import Episode, RouteKinds
from traffic.store import InferenceFilter, StoreBackend

ServedBy = Literal["frontier", "local", "mixed"]
GROUPS: tuple[str, ...] = ("frontier", "with_local", "local", "mixed")


def served_by(episode: Episode) -> ServedBy:
    kinds = {s.route_kind for s in episode.steps}
    if kinds == {"local"}:
        return "local"
    return "frontier" if "local" not in kinds else "mixed"


@dataclass(slots=True)
class _Tally:
    episodes: int = 0
    judged: int = 0
    passed: int = 0

    def add(self, episode: Episode) -> None:
        self.episodes += 1
        if episode.verdict is not None:
            self.judged += 1
            self.passed += episode.verdict == "accepted"

    def view(self) -> dict[str, Any]:
        rate = self.passed / self.judged if self.judged else None
        return {"episodes": self.episodes, "judged": self.judged, "success": rate}


@dataclass(slots=True)
class AgentRoundFigures:
    """One round's agent figures (definitions in the module docstring)."""

    round: int
    episodes: int
    steps: int
    local_steps: int
    local_share: float | None
    success: dict[str, dict[str, Any]]
    local_tool_calls: int
    local_valid_calls: int
    local_validity: float | None
    local_steps_without_call: int
    cost_per_episode_usd: float | None
    failed_steps: int
    by_kind: dict[str, dict[str, Any]]
    client: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    paired_frontier: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def agent_figures(
    round_index: int, episodes: Sequence[Episode], kinds: Mapping[str, str]
) -> AgentRoundFigures:
    """Fold rebuilt episodes into the round's figures."""
    groups = {name: _Tally() for name in ("overall", *GROUPS)}
    by_kind: dict[str, dict[str, _Tally]] = {}
    steps = local_steps = calls = valid = no_call = failed = 0
    costs: list[float] = []
    for episode in episodes:
        who = served_by(episode)
        groups["overall"].add(episode)
        groups[who].add(episode)
        if who != "frontier":
            groups["with_local"].add(episode)
        kind = by_kind.setdefault(
            kinds.get(episode.episode_id, "?"), {"overall": _Tally(), who: _Tally()}
        )
        kind["overall"].add(episode)
        kind.setdefault(who, _Tally()).add(episode)
        costs.append(sum(s.record.cost_usd or 0.0 for s in episode.steps))
        for step in episode.steps:
            steps += 1
            failed += not step.record.ok
            if step.route_kind != "local":
                continue
            local_steps += 1
            calls += len(step.calls)
            valid += sum(c.valid for c in step.calls)
            no_call += not step.calls
    return AgentRoundFigures(
        round=round_index,
        episodes=len(episodes),
        steps=steps,
        local_steps=local_steps,
        local_share=local_steps / steps if steps else None,
        success={name: tally.view() for name, tally in groups.items()},
        local_tool_calls=calls,
        local_valid_calls=valid,
        local_validity=valid / calls if calls else None,
        local_steps_without_call=no_call,
        cost_per_episode_usd=statistics.mean(costs) if costs else None,
        failed_steps=failed,
        by_kind={
            k: {name: t.view() for name, t in sorted(v.items())} for k, v in sorted(by_kind.items())
        },
    )


async def agent_window_figures(
    store: StoreBackend,
    round_index: int,
    since: datetime,
    kinds: Mapping[str, str],
    *,
    local_targets: Sequence[str] = ("local",),
) -> AgentRoundFigures:
    """The round's figures of the episodes named in ``kinds`` (recorded since ``since``)."""
    routes = RouteKinds(local=frozenset(local_targets))
    found = await episodes_from_store(store, InferenceFilter(since=since), routes=routes)
    ours = [e for e in found if e.episode_id in kinds]
    return agent_figures(round_index, ours, kinds)


def _paired(r: AgentRoundFigures) -> float | None:
    value = r.paired_frontier.get("success")
    return None if value is None else float(value)


def _success(r: AgentRoundFigures, group: str) -> float | None:
    value = r.success.get(group, {}).get("success")
    return None if value is None else float(value)


def agent_targets(rounds: Sequence[AgentRoundFigures]) -> dict[str, Any]:
    """The issue's agent targets as measured (first round = before any training): local share
    of agent steps >= 60%, episode success overall >= 95% of frontier-only, valid tool calls
    >= 98% of local steps' calls; and zero failed agent requests.

    Every round's success is compared with frontier-only on the same episodes
    (``paired_frontier``) where the driver measured it, else with round 0's frontier success;
    the ratio to round 0's is also given (``ratio_vs_round0_per_round``)."""
    if not rounds:
        return {}
    first, last = rounds[0], rounds[-1]
    frontier_only = _success(first, "frontier") or _success(first, "overall") or 0.0
    overall = _success(last, "overall") or 0.0
    failed = sum(int(r.client.get("failed_requests", 0)) for r in rounds)
    validity = last.local_validity
    round0 = [(_success(r, "overall") or 0.0) / frontier_only for r in rounds if frontier_only]
    ratios = [
        (_success(r, "overall") or 0.0) / reference
        for r in rounds
        if (reference := _paired(r) or frontier_only)
    ]
    return {
        "agent_local_share": {
            "per_round": [r.local_share for r in rounds],
            "met": (last.local_share or 0.0) >= 0.6,
        },
        "agent_success_vs_frontier_only": {
            "frontier_only": frontier_only,
            "last": overall,
            "met": overall >= 0.95 * frontier_only,
        },
        "agent_local_tool_call_validity": {
            "per_round": [r.local_validity for r in rounds],
            "met": validity is not None and validity >= 0.98,
        },
        "agent_success_every_round": {
            "reference": "paired" if all(_paired(r) for r in rounds) else "round0",
            "paired_frontier_per_round": [_paired(r) for r in rounds],
            "ratio_per_round": [round(x, 4) for x in ratios],
            "ratio_vs_round0_per_round": [round(x, 4) for x in round0],
            "min": min(ratios) if ratios else None,
            "met": bool(ratios) and min(ratios) >= 0.95,
        },
        "agent_zero_failed_requests": {"failed": failed, "met": failed == 0},
        "agent_gate": [r.gate.get("decision") for r in rounds if r.gate],
    }


def format_agent_table(rounds: Sequence[AgentRoundFigures]) -> str:
    lines = [
        f"{'round':<6}{'eps':>5}{'steps':>6}{'local':>7}{'succ_fr':>12}{'succ_loc':>12}"
        f"{'succ_all':>12}{'valid_loc':>11}{'$/episode':>11}{'gate':>10}"
    ]

    def cell(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    def rate(r: AgentRoundFigures, group: str) -> str:
        g = r.success.get(group, {})
        return f"{cell(g.get('success'), '.2f')} ({g.get('judged', 0)})"

    for r in rounds:
        calls = f"{cell(r.local_validity, '.2f')} ({r.local_tool_calls})"
        lines.append(
            f"{r.round:<6}{r.episodes:>5}{r.steps:>6}{cell(r.local_share, '.0%'):>7}"
            f"{rate(r, 'frontier'):>12}{rate(r, 'with_local'):>12}{rate(r, 'overall'):>12}"
            f"{calls:>11}{cell(r.cost_per_episode_usd, '.5f'):>11}"
            f"{r.gate.get('decision', '-'):>10}"
        )
    return "\n".join(lines)


def plot_agent_curves(rounds: Sequence[AgentRoundFigures], path: Path) -> None:
    """Four panels over rounds: episode success (frontier-only, with local steps, overall),
    local share of agent steps, tool-call validity of local steps, cost per episode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(values: Sequence[float | None]) -> list[float]:
        return [float("nan") if v is None else v for v in values]

    xs = [r.round for r in rounds]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), dpi=100)
    ax = axes.flat[0]
    for group, style in (("frontier", "b-"), ("with_local", "g--"), ("overall", "k-")):
        ax.plot(xs, series([_success(r, group) for r in rounds]), style, marker="o", label=group)
    ax.set_title("episode success by who served its steps")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    panels: list[tuple[str, list[float | None], str]] = [
        ("local share of agent steps", [r.local_share for r in rounds], "g-"),
        ("tool-call validity of local steps", [r.local_validity for r in rounds], "m-"),
        ("cost per episode (USD)", [r.cost_per_episode_usd for r in rounds], "k-"),
    ]
    for i, (ax, (title, ys, style)) in enumerate(zip(list(axes.flat)[1:], panels, strict=True)):
        ax.plot(xs, series(ys), style, lw=2, marker="o")
        ax.set_title(title)
        if i < 2:
            ax.set_ylim(-0.05, 1.05)
        if all(y is None for y in ys):
            ax.text(0.5, 0.5, "no tool call by a local step", ha="center", transform=ax.transAxes)
    for ax in axes.flat:
        ax.set_xlabel("round")
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    fig.suptitle("Switchyard flywheel: agent episodes through the gateway")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
