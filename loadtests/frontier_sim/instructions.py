"""What a user's message asks of the model, read as a provider's model reads it.

The simulator stands in for a frontier model in front of real coding clients (Claude Code, Codex
CLI, Continue, aider, llm), so it must do what such a model does with what users type:

- **The user's own words.** Clients wrap machine-made context into the user's turn as tagged
  blocks (Claude Code's ``<system-reminder>``, Codex's ``<environment_context>``, a finished
  background task's ``<task-notification>``). :func:`user_words` removes every block of the form
  ``<tag ...>...</tag>`` whose tag is one word; what is left is what the person typed. A user
  message with no words left is context, not a new turn.
- **Tool permission.** "Do not use any tools", "without tools", "no tools", "answer directly":
  :attr:`Instruction.forbids_tools`, and the model answers in text.
- **Delegation.** A model starts a sub-agent or background task (Claude Code's ``Agent``/``Task``
  tools) only when the user asks for one in so many words ("use a sub-agent", "delegate",
  "in the background"): :attr:`Instruction.asks_delegation`.
- **A small task's steps.** Imperative clauses naming files and commands, in the order written:

      read FILE                                   -> read
      replace OLD with NEW in FILE|it             -> edit (``it``: the file named last)
      create|write (a file) FILE containing TEXT  -> write
      run (the command) CMD                       -> run (CMD in backticks, or up to " and",
                                                     a comma, a semicolon or the sentence's end)
      tell me what it printed|output|says         -> the final answer quotes the last output

  OLD, NEW and TEXT are one word, or quoted with backticks, double or single quotes.

The steps are what a competent model would do; which tool performs each one is
:mod:`loadtests.frontier_sim.tool_use`'s business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

StepKind = Literal["read", "edit", "write", "run"]

# A tagged block of machine-made context: <tag ...> ... </tag>, the same one-word tag.
_TAGGED: Final = re.compile(r"<([A-Za-z][\w-]*)(?:\s[^<>]*)?>.*?</\1\s*>", re.DOTALL)
_FORBIDS: Final = re.compile(
    r"\b(?:(?:do\s+not|don'?t|never|must\s+not|without)\s+(?:use\s+|using\s+|call\s+|calling\s+)?"
    r"(?:any\s+)?(?:tools?|functions?|tool\s+calls?)\b|no\s+tools?\b|answer\s+directly\b)",
    re.IGNORECASE,
)
_DELEGATES: Final = re.compile(
    r"\b(?:sub-?agents?|delegate|in\s+the\s+background|background\s+(?:agent|task)s?|"
    r"spawn\s+(?:an?\s+)?agents?|(?:an?|the)\s+(?:agent|task)\s+tool)\b",
    re.IGNORECASE,
)
_QUOTED = r"`[^`]+`|\"[^\"]+\"|'[^']+'"
_WORD = r"[^\s,;]+"
_PATH = r"[\w./~-]*\w\.\w+|[\w./~-]+/[\w.-]+"
_READ: Final = re.compile(rf"\b(?:read|open|look\s+at)\s+(?:the\s+file\s+)?(?P<path>{_PATH})", re.I)
_EDIT: Final = re.compile(
    rf"\breplace\s+(?P<old>{_QUOTED}|{_WORD})\s+with\s+(?P<new>{_QUOTED}|{_WORD})"
    rf"(?:\s+in\s+(?:the\s+file\s+)?(?P<path>it\b|{_PATH}))?",
    re.IGNORECASE,
)
_WRITE: Final = re.compile(
    rf"\b(?:create|write)\s+(?:a\s+)?(?:new\s+)?(?:file\s+)?(?:named\s+|called\s+)?"
    rf"(?P<path>{_PATH})\s+(?:containing|with(?:\s+the)?(?:\s+(?:content|text))?)\s+"
    rf"(?P<content>{_QUOTED}|{_WORD})",
    re.IGNORECASE,
)
_RUN: Final = re.compile(
    r"\brun\s+(?:the\s+command\s+)?(?:`(?P<quoted>[^`]+)`|(?P<plain>.+?)(?=\s+and\s|\s*[,;]|\.\s|\.?\s*$))",
    re.IGNORECASE,
)
_REPORT: Final = re.compile(
    r"\b(?:tell|show)\s+me\s+what\s+(?:it|the\s+command|that)\s+"
    r"(?:printed|prints|outputs?|output|says|said|returned|returns)\b|\breport\s+(?:the\s+|its\s+)?output\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a small task: what to do, on which file, with which text or command."""

    kind: StepKind
    path: str = ""
    old: str = ""
    new: str = ""
    content: str = ""
    command: str = ""


@dataclass(frozen=True, slots=True)
class Instruction:
    """What the user's latest message asks (see the module docstring)."""

    words: str
    forbids_tools: bool = False
    asks_delegation: bool = False
    steps: tuple[Step, ...] = ()
    report_output: bool = False


def user_words(text: str) -> str:
    """``text`` without the tagged blocks clients add around the user's own words."""
    if "<" not in text:
        return text.strip()
    return _TAGGED.sub(" ", text).strip()


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "`\"'":
        return text[1:-1]
    return text


def read_instruction(text: str) -> Instruction:
    """The instruction in the user's message ``text`` (tagged context blocks are removed)."""
    words = user_words(text)
    forbids = bool(_FORBIDS.search(words))
    found: list[tuple[int, Step]] = []
    for match in _READ.finditer(words):
        found.append((match.start(), Step("read", path=match["path"])))
    for match in _EDIT.finditer(words):
        step = Step("edit", path=match["path"] or "", old=_unquote(match["old"]))
        found.append((match.start(), _with_new(step, _unquote(match["new"]))))
    for match in _WRITE.finditer(words):
        step = Step("write", path=match["path"], content=_unquote(match["content"]))
        found.append((match.start(), step))
    for match in _RUN.finditer(words):
        command = (match["quoted"] or match["plain"] or "").strip()
        if command:
            found.append((match.start(), Step("run", command=command)))
    steps: list[Step] = []
    last_path = ""
    for _, step in sorted(found, key=lambda pair: pair[0]):
        if step.kind == "edit" and step.path in ("", "it"):
            step = Step("edit", path=last_path, old=step.old, new=step.new)
        if step.path:
            last_path = step.path
        if step.kind != "edit" or step.path:
            steps.append(step)
    return Instruction(
        words=words,
        forbids_tools=forbids,
        asks_delegation=not forbids and bool(_DELEGATES.search(words)),
        steps=() if forbids else tuple(steps),
        report_output=bool(_REPORT.search(words)),
    )


def _with_new(step: Step, new: str) -> Step:
    return Step(step.kind, path=step.path, old=step.old, new=new)
