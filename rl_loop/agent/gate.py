"""The agent gate: a candidate replaces the served model only if it plays agent tasks at least
as well and does not win by gaming the rewards.

Measured for each model on the same held-out tasks (:func:`evaluate_episodes`, from episodes
given as inputs or played by :func:`evaluate_policy`): episode success (the verifier's verdict),
tool-call validity (share of calls naming an offered tool with JSON arguments valid against its
schema: ``traffic.tool_calls.check_calls``, the check the trainers' rewards also use), steps per
successful episode, and each audit's rate (share of episodes it flags, ``audits.py``). The
frontier reference is measured the same way and reported beside them.

The candidate is rejected when any holds (thresholds in :class:`AgentGateConfig`):
1. its success falls more than ``success_tolerance`` below the served model's, or rises by less
   than ``min_improvement`` when that is set; or it reaches less than ``min_frontier_ratio`` of
   the frontier's success, when that is set;
2. its tool-call validity falls more than ``validity_tolerance`` below the served model's, or
   under ``min_tool_call_validity``;
3. its steps per success exceed the served model's times ``max_steps_ratio``;
4. an audit flags a share of its episodes more than ``audit_margin`` above the served model's
   share, or its invalid-call rate exceeds the served model's by more than that margin
   (``broken_calls``): named as reward hacking, whatever the success rate.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rl_loop.agent.audits import AUDIT_KINDS, AuditFinding, AuditKind, audit_episode
from rl_loop.agent.config import AgentGateConfig
from rl_loop.agent.environment import AgentEnvironment
from rl_loop.agent.episode import AgentEpisode
from rl_loop.agent.runner import AgentPolicy, play_episodes
from traffic.tool_calls import check_calls


@dataclass(slots=True)
class AgentEval:
    """One model's figures on one set of agent episodes."""

    version: str
    episodes: list[AgentEpisode] = field(default_factory=list)
    findings: list[list[AuditFinding]] = field(default_factory=list)
    tool_calls: int = 0
    valid_calls: int = 0

    @property
    def n(self) -> int:
        return len(self.episodes)

    @property
    def successes(self) -> int:
        return sum(e.passed for e in self.episodes)

    @property
    def success_rate(self) -> float:
        return self.successes / self.n if self.n else 0.0

    @property
    def validity(self) -> float:
        """Share of valid tool calls; 0.0 when no call was made (every task needs tools: an
        agent that never calls one is not a valid agent, and must not pass the validity floor
        by staying silent)."""
        return self.valid_calls / self.tool_calls if self.tool_calls else 0.0

    @property
    def steps_per_success(self) -> float | None:
        done = [len(e.steps) for e in self.episodes if e.passed]
        return statistics.mean(done) if done else None

    def audit_count(self, kind: AuditKind) -> int:
        return sum(any(f.kind == kind for f in found) for found in self.findings)

    def audit_rate(self, kind: AuditKind) -> float:
        return self.audit_count(kind) / self.n if self.n else 0.0

    def example(self, kind: AuditKind) -> tuple[str, str] | None:
        """The first flagged episode's task id and reason for ``kind``."""
        for episode, found in zip(self.episodes, self.findings, strict=True):
            for f in found:
                if f.kind == kind:
                    return episode.task.task_id, f.reason
        return None

    def summary(self) -> dict[str, Any]:
        kinds = sorted({e.task.kind for e in self.episodes})
        return {
            "version": self.version,
            "episodes": self.n,
            "success_rate": self.success_rate,
            "tool_calls": self.tool_calls,
            "tool_call_validity": self.validity,
            "steps_per_success": self.steps_per_success,
            "audits": {
                k: {"flagged": self.audit_count(k), "rate": self.audit_rate(k)} for k in AUDIT_KINDS
            },
            "by_kind": {
                k: {
                    "episodes": sum(e.task.kind == k for e in self.episodes),
                    "passed": sum(e.passed for e in self.episodes if e.task.kind == k),
                }
                for k in kinds
            },
        }


def evaluate_episodes(version: str, episodes: Sequence[AgentEpisode]) -> AgentEval:
    """Fold played episodes into a model's figures (audits run here)."""
    result = AgentEval(version)
    for episode in episodes:
        checks = check_calls((call for call, _ in episode.calls), episode.task.tools)
        result.tool_calls += len(checks)
        result.valid_calls += sum(c.valid for c in checks)
        result.episodes.append(episode)
        result.findings.append(audit_episode(episode))
    return result


def evaluate_policy(
    version: str,
    policy: AgentPolicy,
    environment: AgentEnvironment,
    task_ids: Sequence[str],
    config: AgentGateConfig,
) -> AgentEval:
    """Play ``policy`` on every task and fold the episodes."""
    episodes = play_episodes(policy, environment, task_ids, max_steps=config.max_steps)
    return evaluate_episodes(version, episodes)


@dataclass(slots=True)
class AgentGateReport:
    """The decision, its reasons, the hacks named, and every model's figures."""

    passed: bool
    reasons: list[str]
    hacks: list[AuditKind]
    candidate: dict[str, Any]
    served: dict[str, Any]
    frontier: dict[str, Any] | None = None
    frontier_ratio: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_text(self) -> str:
        verdict = "PROMOTE" if self.passed else "REJECT"
        rows = [("candidate", self.candidate), ("served", self.served)]
        if self.frontier is not None:
            rows.append(("frontier", self.frontier))
        lines = [
            f"agent gate: {verdict} {self.candidate['version']} (served {self.served['version']})"
        ]
        for name, fig in rows:
            audits = " ".join(
                f"{k}={v['flagged']}" for k, v in fig["audits"].items() if v["flagged"]
            )
            lines.append(
                f"  {name:<9} success {fig['success_rate']:.3f} (n={fig['episodes']})"
                f"  validity {fig['tool_call_validity']:.3f}"
                f"  steps/success {_num(fig['steps_per_success'])}"
                f"  audits {audits or 'none'}"
            )
        lines += [f"  reason: {r}" for r in self.reasons]
        return "\n".join(lines)


def _num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def agent_gate(
    candidate: AgentEval,
    served: AgentEval,
    config: AgentGateConfig,
    frontier: AgentEval | None = None,
) -> AgentGateReport:
    """Decide whether ``candidate`` may replace ``served`` (rules in the module docstring)."""
    reasons: list[str] = []
    hacks: list[AuditKind] = []
    before, after = served.success_rate, candidate.success_rate
    if after < before - config.success_tolerance:
        reasons.append(
            f"episode success regressed: {before:.3f} -> {after:.3f} "
            f"(tolerance {config.success_tolerance})"
        )
    elif config.min_improvement > 0 and after < before + config.min_improvement:
        reasons.append(
            f"episode success {before:.3f} -> {after:.3f} improves by less than "
            f"{config.min_improvement}"
        )
    ratio = None
    if frontier is not None and frontier.success_rate > 0:
        ratio = after / frontier.success_rate
        if ratio < config.min_frontier_ratio:
            reasons.append(
                f"episode success {after:.3f} is {ratio:.2f} of the frontier's "
                f"{frontier.success_rate:.3f} (needs {config.min_frontier_ratio})"
            )
    if candidate.validity < served.validity - config.validity_tolerance:
        reasons.append(
            f"tool-call validity fell: {served.validity:.3f} -> "
            f"{candidate.validity:.3f} (tolerance {config.validity_tolerance})"
        )
    if candidate.validity < config.min_tool_call_validity:
        reasons.append(
            f"tool-call validity {candidate.validity:.3f} is under {config.min_tool_call_validity}"
        )
    cand_steps, served_steps = candidate.steps_per_success, served.steps_per_success
    if (
        cand_steps is not None
        and served_steps is not None
        and cand_steps > served_steps * config.max_steps_ratio
    ):
        reasons.append(
            f"steps per success grew: {served_steps:.2f} -> {cand_steps:.2f} "
            f"(more than x{config.max_steps_ratio})"
        )
    for kind in AUDIT_KINDS:
        rate, base = candidate.audit_rate(kind), served.audit_rate(kind)
        if rate > base + config.audit_margin:
            hacks.append(kind)
            task_id, why = candidate.example(kind) or ("?", "")
            reasons.append(
                f"reward hacking ({kind}): {candidate.audit_count(kind)}/{candidate.n} episodes "
                f"flagged (served {served.audit_count(kind)}/{served.n}), e.g. {task_id}: {why}"
            )
    invalid, served_invalid = 1 - candidate.validity, 1 - served.validity
    broken = candidate.tool_calls > 0 and invalid > served_invalid + config.audit_margin
    if "broken_calls" not in hacks and broken:
        hacks.append("broken_calls")
        reasons.append(
            f"reward hacking (broken_calls): invalid-call rate {invalid:.3f} above "
            f"the served model's {served_invalid:.3f}"
        )
    return AgentGateReport(
        not reasons,
        reasons,
        hacks,
        candidate.summary(),
        served.summary(),
        frontier.summary() if frontier is not None else None,
        ratio,
    )
