"""The request's text as the request scorer reads it (``router/scorer.py``).

Standard library only, so ``router.features.RequestFeatures`` can carry it (``text``) without
importing the scorer or numpy.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    """

    system: str = ""
    last_user: str = ""
    turns: int = 1
    tool_names: tuple[str, ...] = ()
    prompt_chars: int = 0
    has_tools: bool = False
    endpoint: str = "chat.completions"
