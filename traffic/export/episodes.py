"""Episodes rebuilt from the record: an agent's whole trajectory from the turns it sent.

An episode is every inference that carries one ``episode_id`` (the gateway reads it from what
the client sends: ``gateway.routing.episode_id``), in id (time) order; each inference is one
*step*. The trajectory is not stitched from the steps: a client sends its whole history every
turn, so the last turn's conversation in the internal format (``conversation.conversation_of``:
its prompt, as the served model saw it, plus its answer) already holds every message, tool call
and tool result. Rebuilding (:func:`rebuild_episode`):

1. each row is read as ``(prompt, tools, answer)``; a row that cannot be read is a problem;
2. the trajectory is the last readable step's prompt plus its answer;
3. the check: every earlier step's prompt plus its answer must be where that step left it, a
   prefix of the trajectory (messages compared by role, text and each call's name and
   arguments; call ids may be renamed by a translating door). A client that rewrote its history
   (compaction, an edited message) breaks this, and the episode says so in ``problems``;
4. each step gets the tool results that followed its answer in the trajectory, a validity
   check of each of its tool calls against the tools it was offered (:class:`CallCheck`: an
   unknown tool, arguments that are not a JSON object, or arguments against the tool's JSON
   schema), its route (``local`` or ``frontier``, see :class:`RouteKinds`), latency and cost;
5. the verdict is the latest ``accepted`` / ``rejected`` feedback on any of its inferences (the
   agent client posts it on the last one), with ``payload.reason``.

:func:`episode_view` is the JSON the admin API and the CLI show. :func:`group_episodes` reads
rows of many episodes (in any order) into episodes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from traffic.export.conversation import (
    AssistantTurn,
    LegacyTranslator,
    Message,
    UnsupportedShape,
    conversation_of,
)
from traffic.store.records import InferenceRecord, InferenceRow
from traffic.tool_calls import CallCheck, check_call

RouteKind = Literal["local", "frontier"]
Verdict = Literal["accepted", "rejected"]


@dataclass(frozen=True, slots=True)
class RouteKinds:
    """Which route targets are the local model: the named ``local`` targets when given (the
    gateway knows them from its config), else every target not starting with a frontier
    prefix (the exporters' convention, ``BuildConfig.frontier_route_prefixes``)."""

    local: frozenset[str] | None = None
    frontier_prefixes: tuple[str, ...] = ("frontier",)

    def of(self, target: str) -> RouteKind:
        if self.local is not None:
            return "local" if target in self.local else "frontier"
        return "frontier" if target.startswith(self.frontier_prefixes) else "local"


@dataclass(frozen=True, slots=True)
class EpisodeStep:
    """One inference of an episode: where it went, how it went, what it answered."""

    index: int
    record: InferenceRecord
    route_kind: RouteKind
    prompt: list[Message] | None  # None: the row could not be read
    answer: AssistantTurn | None
    tool_results: tuple[Message, ...] = ()
    calls: tuple[CallCheck, ...] = ()

    @property
    def ok(self) -> bool:
        return self.record.ok and self.answer is not None


@dataclass(frozen=True, slots=True)
class Episode:
    """A rebuilt episode (see the module docstring)."""

    episode_id: str
    steps: tuple[EpisodeStep, ...]
    messages: list[Message]
    tools: list[dict[str, Any]]
    verdict: Verdict | None = None
    verdict_reason: str | None = None
    problems: tuple[str, ...] = ()

    @property
    def consistent(self) -> bool:
        """Every step's turn is part of the trajectory and every row could be read."""
        return not self.problems

    @property
    def complete(self) -> bool:
        """The last step answered in text (the agent finished, not cut off mid-call)."""
        last = self.steps[-1] if self.steps else None
        return (
            last is not None
            and last.ok
            and last.answer is not None
            and not (last.answer.tool_calls)
        )

    @property
    def reward(self) -> float | None:
        """The terminal reward: 1.0 accepted, 0.0 rejected, None without a verdict."""
        return None if self.verdict is None else float(self.verdict == "accepted")

    @property
    def tool_calls(self) -> int:
        return sum(len(s.calls) for s in self.steps)

    @property
    def invalid_calls(self) -> int:
        return sum(not c.valid for s in self.steps for c in s.calls)


def _comparable(message: Message) -> tuple[Any, ...]:
    calls = tuple(
        (c["function"]["name"], _json_or_text(c["function"]["arguments"]))
        for c in message.get("tool_calls") or ()
    )
    return (message["role"], message.get("content") or None, calls)


def _json_or_text(text: str) -> Any:
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except (json.JSONDecodeError, TypeError):
        return text


def _verdict(rows: Sequence[InferenceRow]) -> tuple[Verdict | None, str | None]:
    judged = sorted(
        (f for row in rows for f in row.feedback if f.kind in ("accepted", "rejected")),
        key=lambda f: (f.ts, f.id),
    )
    if not judged:
        return None, None
    last = judged[-1]
    reason = (last.payload or {}).get("reason")
    verdict: Verdict = "accepted" if last.kind == "accepted" else "rejected"
    return verdict, reason if isinstance(reason, str) else None


def rebuild_episode(
    rows: Iterable[InferenceRow],
    *,
    legacy: LegacyTranslator | None = None,
    routes: RouteKinds | None = None,
) -> Episode:
    """The episode of ``rows`` (all of one episode id, any order); see the module docstring."""
    ordered = sorted(rows, key=lambda r: r.inference.id)
    if not ordered:
        raise ValueError("an episode needs at least one row")
    routes = routes or RouteKinds()
    problems: list[str] = []
    parsed: list[tuple[list[Message], list[dict[str, Any]], AssistantTurn | None] | None] = []
    for i, row in enumerate(ordered):
        try:
            parsed.append(conversation_of(row.inference, legacy))
        except UnsupportedShape as exc:
            parsed.append(None)
            problems.append(f"step {i}: {exc.reason}")
    last = next((p for p in reversed(parsed) if p is not None), None)
    messages: list[Message] = []
    tools: list[dict[str, Any]] = []
    if last is not None:
        prompt, tools, answer = last
        messages = [*prompt, *([answer.to_message()] if answer else [])]
    final = [_comparable(m) for m in messages]
    steps: list[EpisodeStep] = []
    for i, (row, item) in enumerate(zip(ordered, parsed, strict=True)):
        kind = routes.of(row.inference.route_target)
        if item is None:
            steps.append(EpisodeStep(i, row.inference, kind, None, None))
            continue
        prompt, offered, answer = item
        turn = [*prompt, *([answer.to_message()] if answer else [])]
        if [_comparable(m) for m in turn] != final[: len(turn)]:
            problems.append(f"step {i}: its turn is not part of the final conversation")
        results: list[Message] = []
        for m in messages[len(prompt) + 1 :] if answer is not None else ():
            if m["role"] != "tool":
                break
            results.append(m)
        calls = tuple(
            check_call(c.id, c.name, c.arguments, offered)
            for c in (answer.tool_calls if answer else ())
        )
        steps.append(EpisodeStep(i, row.inference, kind, prompt, answer, tuple(results), calls))
    verdict, reason = _verdict(ordered)
    episode_id = ordered[0].inference.episode_id or f"row:{ordered[0].inference.id}"
    return Episode(episode_id, tuple(steps), messages, tools, verdict, reason, tuple(problems))


def group_episodes(
    rows: Iterable[InferenceRow],
    *,
    legacy: LegacyTranslator | None = None,
    routes: RouteKinds | None = None,
) -> list[Episode]:
    """Rows of any episodes (rows without an episode id are left out), rebuilt, oldest first."""
    by_episode: dict[str, list[InferenceRow]] = {}
    for row in rows:
        if row.inference.episode_id:
            by_episode.setdefault(row.inference.episode_id, []).append(row)
    episodes = [rebuild_episode(r, legacy=legacy, routes=routes) for r in by_episode.values()]
    return sorted(episodes, key=lambda e: e.steps[0].record.id)


def _time(value: datetime) -> str:
    return value.isoformat()


# Figures are rounded (microseconds, 1e-10 USD): more digits say nothing, and readers such as
# ``datasets`` parse JSON floats to within a unit in the last place only.
def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _usd(value: float | None) -> float | None:
    return None if value is None else round(value, 10)


def step_view(step: EpisodeStep) -> dict[str, Any]:
    """One step as JSON: route, latency, cost, tokens, the answer, the tool results, the calls."""
    r = step.record
    return {
        "index": step.index,
        "inference_id": r.id,
        "ts": _time(r.ts),
        "endpoint": r.endpoint,
        "route_target": r.route_target,
        "route_kind": step.route_kind,
        "served_model": r.served_model,
        "policy_reason": r.policy_reason,
        "status": r.status,
        "error": r.error,
        "stream": r.stream,
        "latency_ms": _ms(r.latency_ms),
        "ttft_ms": _ms(r.ttft_ms),
        "prompt_tokens": r.prompt_tokens,
        "completion_tokens": r.completion_tokens,
        "cost_usd": _usd(r.cost_usd),
        "answer": step.answer.to_message() if step.answer else None,
        "tool_results": list(step.tool_results),
        "tool_calls": [
            {"id": c.id, "name": c.name, "valid": c.valid, "problem": c.problem} for c in step.calls
        ],
    }


def episode_summary(episode: Episode) -> dict[str, Any]:
    """The episode's figures: steps, where they went, tool-call validity, latency, cost."""
    steps = episode.steps
    local = sum(s.route_kind == "local" for s in steps)
    costs = [s.record.cost_usd for s in steps if s.record.cost_usd is not None]
    return {
        "steps": len(steps),
        "local_steps": local,
        "frontier_steps": len(steps) - local,
        "failed_steps": sum(not s.record.ok for s in steps),
        "tool_calls": episode.tool_calls,
        "invalid_tool_calls": episode.invalid_calls,
        "latency_ms": _ms(sum(s.record.latency_ms for s in steps)),
        "cost_usd": _usd(sum(costs)) if costs else None,
    }


def episode_view(episode: Episode) -> dict[str, Any]:
    """The whole episode as JSON (what ``GET /admin/episodes/{id}`` answers)."""
    return {
        "object": "episode",
        "episode_id": episode.episode_id,
        "verdict": episode.verdict,
        "verdict_reason": episode.verdict_reason,
        "reward": episode.reward,
        "consistent": episode.consistent,
        "complete": episode.complete,
        "problems": list(episode.problems),
        "summary": episode_summary(episode),
        "steps": [step_view(s) for s in episode.steps],
        "messages": episode.messages,
        "tools": episode.tools,
    }
