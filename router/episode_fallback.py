"""In-episode fallback: an agent's episode leaves the local model after one of its steps fails.

Definitions
- Episode, step: an agent's session (``RequestFeatures.episode_id``) and one model call of it.
  The step index is read from the request itself (``RequestText.step``: the assistant turns
  already in the history; a client sends its whole history every turn), so a retried request has
  the same index and every gateway process computes the same one.
- Memory (:class:`EpisodeMemory`, kept by the gateway per episode, shared by the fleet): which
  steps were sent to a local target (the last :data:`KEPT_LOCAL_STEPS`), and the fallback in
  force (the step it began at and why).
- A local step failed when the next request's history shows it (the client sends back its tool
  calls and their results, whatever door or stream mode served the answer):
  * ``invalid_tool_call``: a call of that step names a tool the request does not offer, or its
    arguments are not a JSON object or break the tool's JSON schema (the gateway checks the calls
    with ``traffic.tool_calls.check_call``, the one check of a call's validity);
  * ``error_streak``: the conversation's last ``episodes.error_streak`` tool results are errors
    (``router.chat_text.is_error_result``; ``RequestText.tool_error_streak``), the last of them
    answering that step.
- Fallback: from the step after the failure, ``episodes.sticky_turns`` turns (null: the rest of
  the episode) go to the fallback target (``episodes.fallback_target``, else the learned
  policy's frontier target, else the first non-local target of the decision's chain) with its
  fallback chain, when the policy chose a local target the client did not pin (``alias:*`` and
  ``target`` reasons are the client's choice, kept). Then the policy decides again.
- Reason recorded: ``episode_fallback:<kind> failed_step=<i> problem=<what> turn=<k>/<n>``
  (``n`` is ``rest`` for the rest of the episode).
- Whole loops (``episodes.whole_loops``): a step that goes on an agent loop (its last message
  is a tool result) runs on the model the loop's previous step ran on, where the learned policy
  decided it (``learned:local`` / ``learned:frontier`` / ``learned:explore``):
  * the previous step was local: local again (unless a fallback is in force), reason
    ``episode_loop:local <the policy's reason>``;
  * it was not: neither an exploration draw nor a score sends it local, reason
    ``episode_loop:frontier <the policy's reason>``.
  So a loop's model is chosen at its first step (a new user turn: the request says the task),
  by score or exploration, and runs it until it ends or fails. Why: one wrong step spoils a
  whole episode, a loop is judged by its own outcome (one model's credit, not a mix) and it
  keeps one replica's KV cache (docs/routing.md, "Agent episodes: why a loop runs on one
  model"). A chat turn (its last message the user's) is decided by the policy as before.

Pure: the gateway reads and writes the memory (``gateway.routing.episodes``) and checks calls.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal

from router.config import EpisodeRoutingConfig
from router.decision import LEARNED_KINDS, PINNED_KINDS, RouteDecision
from router.request_text import RequestText

KEPT_LOCAL_STEPS: Final = 8  # local step indices remembered per episode (the newest)
FailureKind = Literal["invalid_tool_call", "error_streak"]


@dataclass(frozen=True, slots=True)
class EpisodeMemory:
    """What the gateway remembers of one episode's routing."""

    local_steps: frozenset[int] = frozenset()
    fallback_step: int | None = None  # the first step the fallback sent to the frontier
    fallback_reason: str = ""  # "<kind> failed_step=<i> problem=<what>"

    def with_local(self, step: int) -> EpisodeMemory:
        steps = self.local_steps | {step}
        if len(steps) > KEPT_LOCAL_STEPS:
            steps = frozenset(sorted(steps)[-KEPT_LOCAL_STEPS:])
        return replace(self, local_steps=steps)


@dataclass(frozen=True, slots=True)
class StepFailure:
    """Why the previous (local) step failed."""

    kind: FailureKind
    step: int
    problem: str

    @property
    def reason(self) -> str:
        return f"{self.kind} failed_step={self.step} problem={self.problem}"


def failed_step(
    memory: EpisodeMemory,
    text: RequestText,
    call_problem: str | None,
    config: EpisodeRoutingConfig,
) -> StepFailure | None:
    """The previous step's failure, when it was local and failed (module docstring).

    ``call_problem``: the first problem of the previous step's tool calls (``text.last_calls``)
    as the caller found it (e.g. ``unknown_tool``), None when they are valid or there are none.
    """
    previous = text.step - 1
    if previous < 0 or previous not in memory.local_steps:
        return None
    if call_problem is not None:
        return StepFailure("invalid_tool_call", previous, call_problem)
    if text.tool_error_streak >= config.error_streak:
        return StepFailure("error_streak", previous, f"{text.tool_error_streak}_errors")
    return None


def fallback_turn(memory: EpisodeMemory, step: int, config: EpisodeRoutingConfig) -> int | None:
    """Which turn of the fallback in force ``step`` is (1 = the first), None when none is."""
    if memory.fallback_step is None:
        return None
    turn = step - memory.fallback_step + 1
    if turn < 1 or (config.sticky_turns is not None and turn > config.sticky_turns):
        return None
    return turn


def pinned(decision: RouteDecision) -> bool:
    """The client chose the target itself (a pinned alias or a target's own name)."""
    return decision.kind in PINNED_KINDS


def fallback_target(
    decision: RouteDecision,
    config: EpisodeRoutingConfig,
    frontier_target: str | None,
    local_targets: frozenset[str],
) -> str | None:
    """Where a fallen-back turn goes (module docstring); None when no target qualifies."""
    if config.fallback_target is not None:
        return config.fallback_target
    if frontier_target is not None:
        return frontier_target
    return next((t for t in decision.targets if t not in local_targets), None)


def fallback_decision(
    decision: RouteDecision,
    chain: tuple[str, ...],
    memory: EpisodeMemory,
    turn: int,
    config: EpisodeRoutingConfig,
) -> RouteDecision:
    """The policy's ``decision`` replaced by the fallback's: ``chain`` (the fallback target and
    its fallbacks), the reason naming the failure and the turn."""
    total = "rest" if config.sticky_turns is None else str(config.sticky_turns)
    reason = f"episode_fallback:{memory.fallback_reason} turn={turn}/{total}"
    return replace(
        decision,
        targets=chain,
        reason=reason,
        kind="episode_fallback",
        decided=decision.decided_target,
        # The fallback leaves the local target for certain (None: the policy names no local).
        propensity=None if decision.propensity is None else 0.0,
    )


LOOP_LOCAL: Final = "episode_loop:local"
LOOP_FRONTIER: Final = "episode_loop:frontier"


def loop_decision(
    decision: RouteDecision,
    memory: EpisodeMemory,
    text: RequestText,
    *,
    local_chain: tuple[str, ...],
    frontier_chain: tuple[str, ...],
) -> RouteDecision:
    """The policy's ``decision`` for a step that goes on an agent loop, made whole (module
    docstring: whole loops); other steps' decisions as they are."""
    if not text.last_tool_result or text.step == 0:
        return decision
    if decision.kind not in LEARNED_KINDS:
        return decision  # pinned, a rule, a canary: kept
    previous_local = text.step - 1 in memory.local_steps
    if previous_local == (decision.target == local_chain[0]):
        return decision  # the loop's model already
    if previous_local:  # a fallback in force still applies after this
        chain, reason = local_chain, f"{LOOP_LOCAL} {decision.reason}"
    else:
        chain, reason = frontier_chain, f"{LOOP_FRONTIER} {decision.reason}"
    return replace(
        decision,
        targets=chain,
        reason=reason,
        kind="episode_loop",
        decided=decision.decided_target,
        propensity=1.0 if chain is local_chain else 0.0,  # the loop's model, for certain
    )
