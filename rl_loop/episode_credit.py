"""Verdicts for the steps of an agent episode, from the episode's one verdict: what the refit
learns about tool-bearing requests.

An agent client judges a whole episode and posts one verdict, on its last answered turn
(``loadtests.agent.client``; real clients' thumbs work the same way). The steps before it carry
none, so without this the refit would count one outcome per episode (its last turn) and never
learn that the local model fails at the steps in the middle: the scorer then sends tool-bearing
steps local on the strength of chat outcomes (measured: 91% of agent steps local in round 3 of
a quick flywheel, episode success 0).

Credit, per step of an episode whose verdict sits on its last step:

- a step with a tool call that is not an offered tool or whose arguments are not a JSON object
  (``traffic.tool_calls.check_call``): rejected, whatever the episode's end (the step penalty of
  the RL side, ``rl_loop.agent.episode_rl``);
- a local step after which the gateway fell back to the frontier
  (``router.episode_fallback``: the next step's recorded ``decision_kind`` is
  ``episode_fallback``):
  rejected, the gateway saw it fail;
- any other step: the episode's verdict (the terminal reward, shared by its steps).

The judged last step keeps its own verdict. Steps of an episode without a verdict, or whose
verdict is on another step than the last (a chat session judged turn by turn), get nothing here.
"""

from __future__ import annotations

from collections.abc import Iterable

from traffic.export.episodes import Episode, RouteKinds, group_episodes
from traffic.store import InferenceRow

#: The decision kind the gateway records on a step sent to the frontier after a local failure
#: (rows written before the store's migration 6 carry none: no fallback is read from them).
FALLBACK_KIND = "episode_fallback"


def _judged_last(episode: Episode) -> bool:
    """The episode's verdict is on its last step and only there."""
    return episode.verdict is not None and len(episode.steps) > 1


def episode_step_verdicts(
    episodes: Iterable[Episode],
) -> dict[str, bool]:
    """Inference id -> the credit of each unjudged step of a judged episode (module docstring)."""
    out: dict[str, bool] = {}
    for episode in episodes:
        if not _judged_last(episode):
            continue
        accepted = episode.verdict == "accepted"
        steps = episode.steps
        for i, step in enumerate(steps[:-1]):
            if not step.record.ok:
                continue
            following = steps[i + 1].record.decision_kind
            fell_back = step.route_kind == "local" and following == FALLBACK_KIND
            broken = any(not call.valid for call in step.calls)
            out[step.record.id] = accepted and not fell_back and not broken
    return out


def judged_as_whole(
    rows: Iterable[InferenceRow], *, local_target: str, frontier_prefix: str
) -> list[Episode]:
    """The episodes in ``rows`` judged once as a whole: more than one step, a verdict on the
    last step and on no other (rows without an episode id are left out)."""
    by_episode: dict[str, list[InferenceRow]] = {}
    for row in rows:
        if row.inference.episode_id:
            by_episode.setdefault(row.inference.episode_id, []).append(row)
    kept: list[InferenceRow] = []
    for episode_rows in by_episode.values():
        ordered = sorted(episode_rows, key=lambda r: r.inference.id)
        judged = [r for r in ordered if _has_verdict(r)]
        if len(ordered) > 1 and judged == [ordered[-1]]:
            kept += ordered
    routes = RouteKinds(local=frozenset({local_target}), frontier_prefixes=(frontier_prefix,))
    return group_episodes(kept, routes=routes)


def step_verdicts(
    rows: Iterable[InferenceRow], *, local_target: str, frontier_prefix: str
) -> dict[str, bool]:
    """:func:`episode_step_verdicts` of the episodes of ``rows`` :func:`judged_as_whole`."""
    return episode_step_verdicts(
        judged_as_whole(rows, local_target=local_target, frontier_prefix=frontier_prefix)
    )


def _has_verdict(row: InferenceRow) -> bool:
    return any(f.kind in ("accepted", "rejected") for f in row.feedback)
