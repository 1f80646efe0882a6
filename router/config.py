"""Routing policy config: declarative and strict (unknown keys are errors).

A routing config names *targets* (back-ends defined by the gateway's config), *aliases* (the model
names a client may call), *rules* (first match wins) and a *default* target. ``auto`` is the
alias that lets the rules decide. A fallback chain per target says where a request goes when its
target fails.

Example (YAML, under ``routing:``)::

    version: v1
    default: local
    aliases:
      auto: null               # rules decide
      switchyard-local: local
      gpt-4o-mini: frontier-openai
    rules:
      - name: long-prompts
        match: {min_prompt_tokens: 6000}
        target: frontier-anthropic
    fallbacks:
      local: [frontier-openai]
    episodes:                  # an agent's episode leaves the local model after a failed step
      sticky_turns: 3
      error_streak: 3

Tool-bearing requests (agent steps) are decided like any other request: a rule such as
``{name: tools-to-frontier, match: {has_tools: true}, target: frontier-openai}`` still works, but
the learned policy scores agent steps (``router/scorer_features.py``) and ``episodes`` takes an
episode off the local model when one of its local steps fails (``router/episode_fallback.py``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from router.features import Endpoint

AUTO_ALIAS = "auto"


def _default_aliases() -> dict[str, str | None]:
    return {AUTO_ALIAS: None}


class MatchConfig(BaseModel):
    """Conditions on request features; every condition given must hold (AND)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: list[str] | None = Field(
        default=None, description="Requested model names (aliases) this rule applies to."
    )
    endpoints: list[Endpoint] | None = Field(default=None, description="API endpoints.")
    route_hint: list[str] | None = Field(
        default=None, description="Values of the `x-switchyard-route` header or `route` metadata."
    )
    tags: dict[str, str] | None = Field(
        default=None, description="Metadata tags that must all be present with these values."
    )
    min_prompt_tokens: int | None = Field(default=None, ge=0)
    max_prompt_tokens: int | None = Field(default=None, ge=0)
    has_tools: bool | None = None
    stream: bool | None = None


class RuleConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    match: MatchConfig
    target: str


class LearnedConfig(BaseModel):
    """Ops knobs of the learned policy (under ``routing.learned``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    local_target: str = Field(description="Target that serves the local model.")
    frontier_target: str = Field(description="Target used when local is not good enough yet.")
    quality_target: float = Field(
        default=0.95,
        gt=0,
        le=1.5,
        description="The routed mix keeps at least this share of frontier-only acceptance.",
    )
    exploration_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Most of the below-threshold requests that go local to keep learning; less "
        "where exploration's measured harm would spend more than `exploration_budget`.",
    )
    quality_window: int | None = Field(
        default=None,
        ge=1,
        description="Requests in a window the quality target must hold in, not only on average: "
        "the target is raised by that window's binomial spread at the threshold's confidence "
        "(router/calibration.py). None: the target is for the expected accept, and a window "
        "scatters around it (one of 500 requests by about 1% of frontier accept).",
    )
    min_samples: int = Field(
        default=20,
        ge=1,
        description="Held-out local verdicts a segment (plain / tools) needs before any threshold.",
    )
    frontier_check_share: float = Field(
        default=0.02,
        ge=0,
        lt=1,
        description="Of the requests that score past the threshold, this share still goes to the "
        "frontier (a stable hash of the request id): off-policy estimates of a policy that "
        "sends less local then have logged frontier answers to read. Costs money, not quality.",
    )
    calibration_delta: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        description="Error rate of the threshold's test: the routed mix's lower bound at this "
        "one-sided level must keep `quality_target` (router/calibration.py); lower is safer and "
        "sends less local on thin evidence.",
    )
    live_mix_bins: int = Field(
        default=10,
        ge=1,
        description="Score quantile bins the held-out verdicts are re-weighted in to the live "
        "mix (1: no re-weighting); the pool's mix otherwise is whatever shadows and the gate "
        "happened to judge, not what users send.",
    )
    max_weight_ratio: float = Field(
        default=5.0,
        ge=1,
        description="A held-out verdict's 1/propensity weight is trimmed at this multiple of the "
        "median: the weights correct how verdicts were drawn, and untrimmed they cost most of "
        "the evidence (an explored answer weighed twenty others).",
    )
    exploration_budget: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of the quality budget ((1 - quality_target) x frontier accept) "
        "exploration's expected loss may spend; the rest is left to the threshold.",
    )
    explore_unproven_tools: bool = Field(
        default=False,
        description="Explore tool-bearing requests (agent steps) before their segment has "
        "`min_samples` verdicts. Off: a failed step can spend a user's whole episode, so "
        "their first evidence comes from shadows, off the user's path.",
    )
    state_file: str | None = Field(
        default=None, description="JSON file of the fitted state (written by the RL loop)."
    )


class EpisodeRoutingConfig(BaseModel):
    """In-episode fallback (under ``routing.episodes``; ``router/episode_fallback.py``): when a
    step an agent's episode sent to a local target fails, its next turns go to the frontier."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fallback: bool = Field(
        default=True,
        description="Send an episode's next turns to the frontier after a failed "
        "local step (false: steps are decided by the policy alone).",
    )
    whole_loops: bool = Field(
        default=True,
        description="A step that goes on an agent loop (its last message a tool result) runs on "
        "the model the loop's previous step ran on where the learned policy decided it: a "
        "loop's model is chosen at its first step, by score or exploration "
        "(router/episode_fallback.py). Read with `fallback` on.",
    )
    fallback_target: str | None = Field(
        default=None,
        description="Where a fallen-back turn goes; default: `learned.frontier_target`, else the "
        "first non-local target of the decision's fallback chain.",
    )
    sticky_turns: int | None = Field(
        default=3,
        ge=1,
        description="Turns of the episode that go to the frontier after a failure (counting the "
        "first); null: the rest of the episode.",
    )
    error_streak: int = Field(
        default=3,
        ge=1,
        description="A local step fails when the conversation ends with this many consecutive "
        "tool results that are errors.",
    )
    memory_episodes: int = Field(
        default=20_000,
        ge=1,
        description="Episodes whose routing this gateway process remembers (fleet.backend "
        "local; the least recently seen are forgotten first). Read at start-up.",
    )
    memory_ttl_s: float = Field(
        default=6 * 3600.0,
        gt=0,
        description="An episode unseen this long is forgotten (its Redis key expires). Read at "
        "start-up.",
    )


class RoutingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(default="v1", description="Recorded with every decision.")
    default: str = Field(description="Target used when no alias or rule decides.")
    aliases: dict[str, str | None] = Field(
        default_factory=_default_aliases,
        description="Model name a client may call -> target (null: rules decide).",
    )
    rules: list[RuleConfig] = Field(default_factory=list)
    fallbacks: dict[str, list[str]] = Field(
        default_factory=dict, description="Target -> targets to try next, in order."
    )
    learned: LearnedConfig | None = Field(
        default=None, description="Learned local-vs-frontier decision for `auto` traffic."
    )
    episodes: EpisodeRoutingConfig = Field(
        default_factory=EpisodeRoutingConfig,
        description="In-episode fallback of agent steps after a failed local step.",
    )
    pinned_aliases_use_rules: bool = Field(
        default=False,
        description="When true, rules apply to every request, not only to `auto`-like aliases.",
    )

    @model_validator(mode="after")
    def _no_self_fallback(self) -> RoutingConfig:
        for target, chain in self.fallbacks.items():
            if target in chain:
                raise ValueError(f"fallbacks.{target} lists itself; remove `{target}` from it")
        return self

    def referenced_targets(self) -> set[str]:
        refs = {self.default}
        refs.update(t for t in self.aliases.values() if t is not None)
        refs.update(r.target for r in self.rules)
        for target, chain in self.fallbacks.items():
            refs.add(target)
            refs.update(chain)
        if self.learned is not None:
            refs.update((self.learned.local_target, self.learned.frontier_target))
        if self.episodes.fallback_target is not None:
            refs.add(self.episodes.fallback_target)
        return refs
