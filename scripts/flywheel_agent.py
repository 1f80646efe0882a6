"""The agent side of `make flywheel` (scripts/flywheel.py): the agent workload's settings, and
one round's batch of agent episodes through the gateway with its figures rebuilt from the
record (``rl_loop.agent_report``), beside the same episodes played straight against the
frontier provider (the paired frontier-only reference: nothing of it reaches the gateway or
its record, and no feedback is posted)."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from loadtests.agent.client import AgentClientConfig, run_agent_client
from rl_loop.agent_report import AgentRoundFigures, agent_window_figures
from rl_loop.agent_round import AgentGateRound, AgentGateRoundConfig
from traffic.store import StoreBackend

FRONTIER_MODEL = "gpt-4o"  # the frontier target's model (the flywheel's gateway config)


class AgentWorkload(BaseModel):
    """The agent episodes sent each round beside the chat mix, and the agent gate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: int = Field(default=40, ge=0, description="Agent episodes per round; 0: none.")
    concurrency: int = Field(default=2, ge=1)
    max_steps: int = Field(default=12, ge=1, description="Requests per episode at most.")
    max_tokens: int = Field(default=256, ge=8, description="Answer cap of agent requests.")
    success_rate: float = Field(
        default=0.9, ge=0, le=1, description="The simulator's scripted agent solves this share."
    )
    gate: AgentGateRoundConfig = Field(default_factory=AgentGateRoundConfig)


@dataclasses.dataclass(slots=True)
class AgentWork:
    """The agent side of the run: the raw record (the loop's view hides the agent episodes,
    ``hidden``), the gate, and the figures so far."""

    store: StoreBackend
    hidden: set[str]
    gate: AgentGateRound | None
    figures: list[AgentRoundFigures] = dataclasses.field(default_factory=list)


async def agent_traffic(
    work: AgentWork,
    base: str,
    oracle: str,
    round_index: int,
    a: AgentWorkload,
    settle: Callable[[StoreBackend, datetime], Awaitable[None]],
    *,
    seed: int,
) -> AgentRoundFigures:
    """One batch of agent episodes through the gateway (verdicts posted as feedback by the
    client), the same batch straight against the frontier at ``oracle`` as ``FRONTIER_MODEL``
    (the paired reference), then, once ``settle`` says the record is written, the round's agent
    figures rebuilt from the record."""
    since = datetime.now(UTC)
    config = AgentClientConfig(
        gateway=base,
        oracle_url=oracle,
        episodes=a.episodes,
        seed=seed,
        concurrency=a.concurrency,
        max_steps=a.max_steps,
        max_tokens=a.max_tokens,
        timeout_s=180.0,
    )
    stats = await run_agent_client(config)
    direct = config.model_copy(
        update={"gateway": oracle, "model": FRONTIER_MODEL, "send_feedback": False}
    )
    paired = (await run_agent_client(direct)).summary()
    kinds = {e.episode_id: e.kind for e in stats.episodes}
    work.hidden.update(kinds)
    await settle(work.store, since)
    figures = await agent_window_figures(work.store, round_index, since, kinds)
    figures.client = {**stats.summary(), "oracle_failed": stats.oracle_failed}
    figures.paired_frontier = {
        "episodes": paired["episodes"],
        "success": paired["success_rate"],
        "failed_requests": paired["failed_requests"],
    }
    work.figures.append(figures)
    return figures
