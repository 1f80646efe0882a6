"""Agent steps on the request path: the policy's decision, then the episode's fallback.

    decision = policy (canary included) decides the request like any other
    episode id and routing.episodes.fallback on?
      memory = recall(episode)                       (gateway.fleet.episode_memory)
      the previous step was local and failed?         (router.episode_fallback.failed_step:
                                                       its tool calls, checked here against the
                                                       tools offered, or an error streak)
        -> remember the fallback from this step       (note_fallback)
      a step that goes on an agent loop, decided by the learned policy's score or exploration?
        -> the loop's model kept (episodes.whole_loops; router.episode_fallback.loop_decision)
      a fallback in force, the decision local and not pinned by the client
        -> the fallback target's chain, reason episode_fallback:<kind> ... turn=<k>/<n>
      the decision (still) local -> remember this step as local   (note_local)

The verdict is read from the next request's history (the assistant's tool calls and the tool
results the client sends back), so it holds for every door, streamed or not, whichever gateway
process served the step. The step a decision sent local is remembered at decision time: a step
that failed over from local to the frontier still counts as local (its tool calls, the
frontier's, are nearly always valid; at worst the episode spends a few turns at the frontier).

Counters (``/metrics``): ``switchyard_episode_failed_local_steps{kind}``,
``switchyard_episode_fallback_decisions{kind}`` (turns the fallback moved off a local target),
and the memory's (``switchyard_episode_memory_*``).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from gateway.config import SwitchyardConfig
from gateway.fleet.episode_memory import (
    EpisodeMemoryStore,
    LocalEpisodeMemory,
    RedisEpisodeMemory,
)
from gateway.redis_scripts import redis_client
from router.config import EpisodeRoutingConfig
from router.decision import RouteDecision
from router.episode_fallback import (
    EpisodeMemory,
    failed_step,
    fallback_decision,
    fallback_target,
    fallback_turn,
    loop_decision,
    pinned,
)
from router.features import RequestFeatures
from router.request_text import RequestText, ToolCallText
from traffic.tool_calls import first_problem

if TYPE_CHECKING:
    from gateway.routing.table import Routing

log = logging.getLogger(__name__)

Gauge = tuple[str, str, dict[str, str], float]
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def _safe_name(name: str) -> str:
    """A tool name as a reason may show it (no spaces: a reason's fields are split on them)."""
    return "".join(c if c in _NAME_CHARS else "_" for c in name[:64]) or "_"


def call_problem(calls: Iterable[ToolCallText], tools: Any) -> str | None:
    """The first problem of ``calls`` against the offered ``tools``: ``unknown_tool:<name>``,
    ``malformed_arguments:<name>`` or ``schema:<name>``; None when every call is valid."""
    check = first_problem(calls, tools)  # never raises; reads the tools only if there is a call
    if check is None:
        return None
    return f"{check.kind}:{_safe_name(check.name)}"


class EpisodeRouting:
    """The episode step of every decision (module docstring); one per gateway process."""

    def __init__(self, memory: EpisodeMemoryStore | None = None) -> None:
        if memory is None:
            defaults = EpisodeRoutingConfig()
            memory = LocalEpisodeMemory(defaults.memory_episodes, defaults.memory_ttl_s)
        self.memory: EpisodeMemoryStore = memory
        self.failed_steps: Counter[str] = Counter()
        self.fallback_decisions: Counter[str] = Counter()

    @staticmethod
    def reads_text(routing: Routing, features: RequestFeatures) -> bool:
        """Whether :meth:`route` reads the request's text: an agent step (tools offered) of an
        episode the request names, with ``routing.episodes.fallback`` on."""
        return (
            features.episode_id is not None
            and features.has_tools
            and routing.config.routing.episodes.fallback
        )

    async def route(
        self,
        routing: Routing,
        features: RequestFeatures,
        tools: Any,
        decision: RouteDecision,
    ) -> RouteDecision:
        """``decision`` (the policy's), or the episode's fallback in its place."""
        cfg = routing.config.routing.episodes
        episode, text = features.episode_id, features.text
        if episode is None or text is None or not self.reads_text(routing, features):
            return decision  # only agent steps (tools offered) fail or fall back
        local_targets = _local_targets(routing.config)
        memory = await self.memory.recall(episode)
        if fallback_turn(memory, text.step, cfg) is None:
            memory = await self._detect(episode, memory, text, tools, routing)
        learned = routing.config.routing.learned
        if cfg.whole_loops and learned is not None:
            decision = loop_decision(
                decision,
                memory,
                text,
                local_chain=routing.policy.chain(learned.local_target),
                frontier_chain=routing.policy.chain(learned.frontier_target),
            )
        turn = fallback_turn(memory, text.step, cfg)
        if turn is not None and decision.target in local_targets and not pinned(decision):
            frontier = learned.frontier_target if learned is not None else None
            target = fallback_target(decision, cfg, frontier, local_targets)
            if target is not None:
                decision = fallback_decision(
                    decision, routing.policy.chain(target), memory, turn, cfg
                )
                self.fallback_decisions[memory.fallback_reason.split(" ", 1)[0]] += 1
        if decision.target in local_targets:
            await self.memory.note_local(episode, text.step)
        return decision

    async def _detect(
        self,
        episode: str,
        memory: EpisodeMemory,
        text: RequestText,
        tools: Any,
        routing: Routing,
    ) -> EpisodeMemory:
        """The memory with a new fallback from this step when the previous step failed."""
        cfg = routing.config.routing.episodes
        if text.step - 1 not in memory.local_steps:
            return memory  # nothing to check: the calls are checked only for a local step
        failure = failed_step(memory, text, call_problem(text.last_calls, tools), cfg)
        if failure is None:
            return memory
        self.failed_steps[failure.kind] += 1
        log.info("episode %s: local step %d failed (%s)", episode, failure.step, failure.reason)
        await self.memory.note_fallback(episode, text.step, failure.reason)
        return EpisodeMemory(memory.local_steps, text.step, failure.reason)

    def gauges(self) -> Callable[[], Iterable[Gauge]]:
        """The ``/metrics`` readings of the episode step (module docstring)."""

        def read() -> Iterable[Gauge]:
            for kind, n in sorted(self.failed_steps.items()):
                yield (
                    "switchyard_episode_failed_local_steps",
                    "Local agent steps found failed (invalid tool call, error streak; a counter).",
                    {"kind": kind},
                    float(n),
                )
            for kind, n in sorted(self.fallback_decisions.items()):
                yield (
                    "switchyard_episode_fallback_decisions",
                    "Agent turns sent to the frontier by an episode's fallback (a counter).",
                    {"kind": kind},
                    float(n),
                )
            for key, value in self.memory.stats().items():
                yield (
                    f"switchyard_episode_memory_{key}",
                    f"Episode memory: {key}.",
                    {},
                    value,
                )

        return read

    async def aclose(self) -> None:
        await self.memory.aclose()


def _local_targets(config: SwitchyardConfig) -> frozenset[str]:
    return frozenset(name for name, bc in config.backends.items() if bc.kind == "vllm")


def build_episode_routing(config: SwitchyardConfig, shared: bool) -> EpisodeRouting:
    """The episode step for ``config``: its memory in Redis when the fleet is ``shared``."""
    episodes = config.routing.episodes
    if not shared:
        return EpisodeRouting(LocalEpisodeMemory(episodes.memory_episodes, episodes.memory_ttl_s))
    fleet = config.fleet
    client = redis_client(
        fleet.redis_url,
        timeout_s=fleet.timeout_s,
        max_connections=config.auth.redis_max_connections,
    )
    memory = RedisEpisodeMemory(
        client, fleet.name, ttl_s=episodes.memory_ttl_s, retry_s=fleet.retry_s
    )
    return EpisodeRouting(memory)
