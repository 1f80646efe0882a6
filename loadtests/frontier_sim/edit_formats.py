"""Answers for clients that edit through the model's text instead of tools (aider).

aider offers no tools: its system prompt teaches an *edit format* and it applies what the reply
writes. The simulator answers as a model that follows that prompt:

- ``diff`` format (the system prompt teaches "*SEARCH/REPLACE block*" rules): for each edit step
  of the instruction (:mod:`.instructions`) on a file whose content the conversation holds
  (aider sends ``PATH\\n```\\n<content>\\n```\\n`` for each file added to the chat), a block

      PATH
      ```
      <<<<<<< SEARCH
      <the line holding OLD>
      =======
      <that line with NEW>
      >>>>>>> REPLACE
      ```

- ``whole`` format ("*file listing*"): the whole new file in one fenced listing;
- a file the conversation does not hold: the reply asks for it to be added to the chat (aider
  then adds it and asks again);
- a command to run: suggested in a ```bash block (aider shows it; it runs only what a person
  confirms);
- aider's commit-message request (its system prompt asks for "one-line Git commit messages"):
  one line, ``fix: <what the instruction edits>``.

The rules aider appends to the user's message (from "# *SEARCH/REPLACE block* Rules" on) are
its own, not the user's, and are not read as the instruction.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final, Literal

from loadtests.frontier_sim.instructions import Instruction, Step, read_instruction

EditFormat = Literal["diff", "whole"]

_RULES: Final = re.compile(r"\n#+ \*(?:SEARCH/REPLACE block|file listing)\*", re.IGNORECASE)
_COMMIT_REQUEST: Final = re.compile(r"one-line git commit messages?", re.IGNORECASE)


def edit_format(system_text: str) -> EditFormat | None:
    """The edit format a system prompt teaches, if it teaches one."""
    if "*SEARCH/REPLACE block*" in system_text:
        return "diff"
    if "*file listing*" in system_text:
        return "whole"
    return None


def is_commit_request(system_text: str) -> bool:
    return bool(_COMMIT_REQUEST.search(system_text))


def user_request(text: str) -> Instruction:
    """The instruction in an aider user message, without the edit rules aider appends."""
    return read_instruction(_RULES.split(text, maxsplit=1)[0])


def file_content(path: str, texts: Sequence[str]) -> str | None:
    """The content of ``path`` as the conversation last showed it in a fenced listing."""
    fence = re.compile(rf"(?:^|\n){re.escape(path)}\n```[^\n]*\n(.*?)\n?```", re.DOTALL)
    for text in reversed(texts):
        found = fence.search(text)
        if found:
            return found.group(1) + "\n"
    return None


def edit_reply(fmt: EditFormat, instruction: Instruction, texts: Sequence[str]) -> str | None:
    """The reply that makes the instruction's edits in ``fmt``; None when it has none."""
    edits = [s for s in instruction.steps if s.kind in ("edit", "write")]
    if not edits:
        return None
    parts: list[str] = []
    missing = [s.path for s in edits if s.kind == "edit" and file_content(s.path, texts) is None]
    if missing:
        names = ", ".join(dict.fromkeys(missing))
        return f"To make this change I need to edit {names}. Please add it to the chat."
    for step in edits:
        parts.append(_block(fmt, step, texts))
    runs = [s.command for s in instruction.steps if s.kind == "run"]
    reply = "Here are the changes:\n\n" + "\n".join(parts)
    if runs:
        commands = "\n".join(runs)
        reply += f"\nThen run:\n\n```bash\n{commands}\n```\n"
    return reply


def _block(fmt: EditFormat, step: Step, texts: Sequence[str]) -> str:
    before = file_content(step.path, texts) or ""
    if step.kind == "write":
        after = step.content + "\n"
        old_lines = before
    else:
        after = before.replace(step.old, step.new)
        old_lines = next((ln + "\n" for ln in before.splitlines() if step.old in ln), before)
    if fmt == "whole":
        return f"{step.path}\n```\n{after}```\n"
    new_lines = old_lines.replace(step.old, step.new) if step.kind == "edit" else after
    return (
        f"{step.path}\n```\n<<<<<<< SEARCH\n{old_lines}=======\n{new_lines}>>>>>>> REPLACE\n```\n"
    )


def commit_message(texts: Sequence[str]) -> str:
    """A one-line commit message for the diff aider shows (from the instruction it quotes)."""
    quoted = next((t for t in reversed(texts) if "USER:" in t), "")
    request = quoted.split("USER:", 1)[-1].split("ASSISTANT:", 1)[0]
    edits = [s for s in user_request(request).steps if s.kind in ("edit", "write")]
    if edits and edits[0].kind == "edit":
        step = edits[0]
        return f"fix: replace {step.old} with {step.new} in {step.path}"
    if edits:
        return f"feat: add {edits[0].path}"
    return "chore: update files"
