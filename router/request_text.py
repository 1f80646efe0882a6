"""The request's text as the request scorer reads it (``router/scorer.py``).

Standard library only, so ``router.features.RequestFeatures`` can carry it (``text``) without
importing the scorer or numpy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ToolCallText:
    """One tool call of an assistant turn, as the model made it (``arguments``: its JSON text)."""

    name: str
    arguments: str
    id: str = ""


@dataclass(frozen=True, slots=True)
class RequestText:
    """The request as the scorer reads it; the gateway fills it from any door, untokenized.

    - ``system``: the system prompt's text ('' if none; Anthropic's ``system``, Responses'
      ``instructions``).
    - ``last_user``: the text of the last user turn (its text parts joined; '' if none).
    - ``turns``: number of messages in the request.
    - ``tool_names``: names of the tools offered, in request order.
    - ``prompt_chars``: characters of the whole prompt (what ``prompt_tokens`` estimates from).
    - ``has_tools``: tools offered.
    - ``endpoint``: a ``router.features.Endpoint`` value (a plain str here: no import cycle).

    An agent's step (a client sends its whole history every turn, so the request says it):

    - ``step``: the assistant turns already in the conversation, i.e. this request's step index
      within its episode (0: the first model call);
    - ``last_tool_result``: the last message is a tool result (the agent loop goes on);
    - ``last_tool_error``: ... and it reports an error (:func:`router.chat_text.is_error_result`);
    - ``tool_error_streak``: the tool results that are errors since the last one that is not
      (messages of other roles in between do not break it: Claude Code follows its tool results
      with reminder text in the same user turn);
    - ``last_calls``: the tool calls of the last assistant turn (the previous step's answer).
    """

    system: str = ""
    last_user: str = ""
    turns: int = 1
    tool_names: tuple[str, ...] = ()
    prompt_chars: int = 0
    has_tools: bool = False
    endpoint: str = "chat.completions"
    step: int = 0
    last_tool_result: bool = False
    last_tool_error: bool = False
    tool_error_streak: int = 0
    last_calls: tuple[ToolCallText, ...] = ()
