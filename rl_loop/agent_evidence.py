"""The agent gate's held-out episodes as routing evidence: each step a local outcome of the
weights that played it.

Why: live agent steps reach the local model only through exploration, and an explored step is
one bad step in a client's episode (a quick flywheel's agent success fell to 0.91 of the
frontier's with a 5% share). The agent gate already plays held-out tasks with the served
weights every round, in the sandbox, off every client's path; its steps say what the live ones
would have said, at no cost to a client, and they are unbiased (never trained on), as the chat
gate's verified answers are (``refit.gate_outcomes``, :func:`rl_loop.ship.gate_outcomes`).

A step is read as the gateway reads a live agent step: the request it answered (the conversation
before it with the task's tools, ``router.chat_text.request_text``), under the evidence class of
a tool-bearing request without tags (``*|tools``). It is judged as :mod:`rl_loop.episode_credit`
judges a live step of an episode with one verdict: rejected when one of its tool calls is broken
(an unknown tool, arguments that are not a JSON object or break the schema:
``traffic.tool_calls.first_problem``), else the episode's verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

from rl_loop.agent.episode import AgentEpisode
from router.chat_text import request_text
from router.features import RequestFeatures
from router.learned import Outcome, class_key
from traffic.tool_calls import first_problem


def episode_step_outcomes(
    episodes: Sequence[AgentEpisode], class_tags: Sequence[str] = ()
) -> list[Outcome]:
    """One local outcome per assistant turn of each episode (module docstring)."""
    out: list[Outcome] = []
    for episode in episodes:
        tools = episode.task.tool_list()
        messages = episode.messages
        at = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        for i, step in zip(at, episode.steps, strict=True):  # one assistant message a step
            text = request_text("chat.completions", {"messages": messages[:i], "tools": tools})
            features = RequestFeatures("chat.completions", "auto", 0, has_tools=True)
            accepted = episode.passed and first_problem(step.calls, tools) is None
            out.append(Outcome(class_key(features, class_tags), "local", accepted, text=text))
    return out
