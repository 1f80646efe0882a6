"""The agent side of a flywheel round: the agent gate on a trained candidate, and keeping the
agent workload's turns out of the chat loop's data.

:class:`AgentGateRound` plays the same held-out agent tasks with the served checkpoint and the
candidate (``rl_loop.agent.checkpoint_policy``: transformers ``generate`` on the checkpoint's
chat template) in an injected environment (the driver passes the sandbox,
``rl_loop.agent.sandbox_environment``) and decides with :func:`rl_loop.agent.gate.agent_gate`.
Greedy decoding on fixed tasks makes a checkpoint's figures a function of its weights, so each
version is played once and remembered (the served model of round r+1 is often round r's
candidate).

:func:`without_episodes` hides the agent workload's episodes from the chat loop: its datasets,
RL prompts and evaluations read the chat traffic they were built for (the agent turns carry no
chat task and their verdict is the whole episode's, on its last turn), until the episode
trainers (``rl_loop.agent``) consume them. The routing refit reads them (each step credited by
``rl_loop.episode_credit``).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rl_loop.agent.checkpoint_policy import CheckpointPolicy
from rl_loop.agent.config import AgentGateConfig
from rl_loop.agent.environment import AgentEnvironment
from rl_loop.agent.gate import AgentEval, agent_gate, evaluate_policy
from rl_loop.agent_evidence import episode_step_outcomes
from rl_loop.store_views import mapped_store
from router.learned import Outcome
from serving.build import read_version
from traffic.store import StoreBackend


class AgentGateRoundConfig(BaseModel):
    """How a round plays the agent gate (the thresholds are :class:`AgentGateConfig`'s)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: int = Field(default=10, ge=0, description="Held-out tasks each model plays; 0: off.")
    max_steps: int = Field(default=6, ge=1, description="Assistant turns per episode at most.")
    max_new_tokens: int = Field(default=128, ge=1, description="Tokens per assistant turn.")
    enforce: bool = Field(
        default=False,
        description="A rejection keeps the served model (False: recorded in the report only; "
        "the candidates are trained on chat traffic today).",
    )
    thresholds: dict[str, Any] = Field(
        default_factory=dict, description="AgentGateConfig overrides."
    )

    def gate_config(self) -> AgentGateConfig:
        values = {"episodes": max(1, self.episodes), "max_steps": self.max_steps}
        return AgentGateConfig.model_validate({**values, **self.thresholds})


class AgentGateRound:
    """Plays held-out agent tasks with checkpoints and gates a candidate against the served one."""

    def __init__(
        self,
        environment: AgentEnvironment,
        task_ids: Sequence[str],
        config: AgentGateRoundConfig,
        *,
        device: str = "cpu",
    ) -> None:
        self.environment = environment
        self.task_ids = list(task_ids)
        self.config = config
        self.device = device
        self._evals: dict[str, tuple[AgentEval, float]] = {}

    def evaluate(self, checkpoint: Path) -> tuple[AgentEval, float]:
        """The checkpoint's figures on the held-out tasks and the seconds they took (blocking:
        call from a worker thread)."""
        version = read_version(checkpoint).version_id
        if version not in self._evals:
            started = time.perf_counter()
            policy = CheckpointPolicy.from_checkpoint(
                checkpoint, self.device, max_new_tokens=self.config.max_new_tokens
            )
            result = evaluate_policy(
                version, policy, self.environment, self.task_ids, self.config.gate_config()
            )
            self._evals[version] = (result, time.perf_counter() - started)
        return self._evals[version]

    async def step_outcomes(self, checkpoint: Path, class_tags: Sequence[str]) -> list[Outcome]:
        """The checkpoint's held-out episodes as routing evidence, one local outcome a step
        (:mod:`rl_loop.agent_evidence`); played now unless this round's gate played them."""
        result, _ = await asyncio.to_thread(self.evaluate, checkpoint)
        return episode_step_outcomes(result.episodes, class_tags)

    async def gate(self, served: Path, candidate: Path) -> dict[str, Any]:
        """The agent gate's decision and figures, as the round's report records them."""
        current, current_s = await asyncio.to_thread(self.evaluate, served)
        trained, trained_s = await asyncio.to_thread(self.evaluate, candidate)
        report = agent_gate(trained, current, self.config.gate_config())
        return {
            "decision": "promote" if report.passed else "reject",
            "enforced": self.config.enforce,
            "tasks": self.task_ids,
            "seconds": {"served": round(current_s, 1), "candidate": round(trained_s, 1)},
            "ended": {
                "served": dict(Counter(e.ended for e in current.episodes)),
                "candidate": dict(Counter(e.ended for e in trained.episodes)),
            },
            "text": report.to_text(),
            **report.to_json(),
        }


def without_episodes(store: StoreBackend, episodes: Collection[str]) -> StoreBackend:
    """``store`` without the inferences of ``episodes`` (read at each row: ids added later are
    left out too)."""
    return mapped_store(store, lambda row: None if row.inference.episode_id in episodes else row)
