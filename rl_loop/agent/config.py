"""Thresholds of the agent gate (``rl_loop.agent.gate``), each defined and documented once, in
the style of ``rl_loop.config.GateConfig``. Unknown keys are errors."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AgentGateConfig(BaseModel):
    """When a candidate may replace the served model on agent episodes (all must hold)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    episodes: int = Field(
        default=40,
        ge=1,
        description="Held-out tasks each model plays (the driver draws them, e.g. "
        "tasks.agent.tasks.heldout_task_ids; never trained on).",
    )
    max_steps: int = Field(default=12, ge=1, description="Assistant turns per episode at most.")
    success_tolerance: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Largest allowed drop of held-out episode success against the served model.",
    )
    min_improvement: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="The candidate's episode success must beat the served model's by this.",
    )
    min_frontier_ratio: float = Field(
        default=0.0,
        ge=0,
        description="Episode success must reach this share of the frontier reference's (0: "
        "reported, not required; the issue's target for learnable tasks is 0.95).",
    )
    validity_tolerance: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="Largest allowed drop of tool-call validity (share of calls naming an "
        "offered tool with schema-valid JSON arguments) against the served model.",
    )
    min_tool_call_validity: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Absolute floor of tool-call validity (0: none; the issue's target is 0.98).",
    )
    max_steps_ratio: float = Field(
        default=1.25,
        ge=1,
        description="Steps per successful episode may grow by at most this factor.",
    )
    audit_margin: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="A candidate whose share of episodes flagged by one audit exceeds the served "
        "model's by more than this is rejected, whatever its success.",
    )
