"""One IDE task: what the user sees and asks, the reference answer, and how replies are read.

Task ids are ``<family>:<seed>``. Seeds below :data:`HELDOUT_SEED_START` make the train split,
seeds from it up to :data:`SEED_LIMIT` the held-out split. Generators also keep the two splits'
contents disjoint: a candidate task whose content hash falls in the other split is redrawn
(:func:`content_split`), so a held-out prompt never appears verbatim in training.

Prompts are OpenAI chat messages as a real client sends them: its client type's one system
prompt (``clients.py``: the same for every family, so nothing but the user message tells tasks
apart, and prefix caches hit) and one user message::

    File: textwrap.py
    ```python
    <context>
    ```
    <instruction>                     <- ends with the answer format, as a user asks for it

No marker, tag or task id is in the prompt; the task id is the client's own bookkeeping.

Answer formats (the instruction asks for one):
- ``line``: the answer alone on one line. Read as the first non-empty line of the reply (of the
  first fenced block's content, if the reply has one), stripped of whitespace and of backticks
  or quotes wrapping the whole line.
- ``code``: one fenced code block (```` ```python ```` or bare ```` ``` ````); its content is the
  answer. A reply without a fence is malformed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from tasks.ide.clients import ClientType, client_profile

AnswerFormat = Literal["line", "code"]
Split = Literal["train", "heldout"]

HELDOUT_SEED_START = 1_000_000_000
SEED_LIMIT = 2 * HELDOUT_SEED_START
HELDOUT_PERCENT = 10
_TASK_ID = re.compile(r"^([a-z][a-z0-9_]*):(\d+)$")
_FENCE = re.compile(r"```[ \t]*[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)


class Verdict(NamedTuple):
    """A verifier's judgement: ``passed`` and the feedback text (the hint for a retry)."""

    passed: bool
    feedback: str


class TaskIdError(ValueError):
    """A task id is malformed or names no registered family."""


def split_of(seed: int) -> Split:
    """The split a generator seed belongs to; raises ValueError outside ``[0, SEED_LIMIT)``."""
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"task seeds are in [0, {SEED_LIMIT}), got {seed}")
    return "train" if seed < HELDOUT_SEED_START else "heldout"


def content_split(text: str) -> Split:
    """The split a task content belongs to: HELDOUT_PERCENT% of contents by hash are held out."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return "heldout" if int.from_bytes(digest, "big") % 100 < HELDOUT_PERCENT else "train"


def make_task_id(family: str, seed: int) -> str:
    return f"{family}:{seed}"


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``(family, seed)`` of a task id; raises :class:`TaskIdError`."""
    match = _TASK_ID.match(task_id)
    if not match:
        raise TaskIdError(f"malformed task id {task_id!r} (expected family:seed)")
    seed = int(match.group(2))
    if seed >= SEED_LIMIT:
        raise TaskIdError(f"task id {task_id!r} has a seed beyond {SEED_LIMIT}")
    return match.group(1), seed


def fence(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


@dataclass(frozen=True, slots=True)
class Task:
    """A generated task. ``reference`` and ``wrong`` are bare answers (no fence).

    ``tests`` is hidden test code run against code answers; ``variants`` are sources the answer
    is run against (write_test's mutants); ``symbol`` names the function the task is about.
    """

    task_id: str
    family: str
    seed: int
    filename: str
    context: str
    instruction: str
    answer_format: AnswerFormat
    reference: str
    wrong: str
    symbol: str = ""
    tests: str = ""
    variants: tuple[str, ...] = ()
    variant_notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("context", "reference", "wrong"):
            if "```" in getattr(self, name):
                raise ValueError(f"task {self.task_id}: {name} may not contain a code fence")
        if self.reference.strip() == self.wrong.strip():
            raise ValueError(f"task {self.task_id}: the wrong answer equals the reference")

    @property
    def split(self) -> Split:
        return split_of(self.seed)

    @property
    def reference_reply(self) -> str:
        """The reference answer as a model should reply it."""
        return render_reply(self.reference, self.answer_format)

    @property
    def wrong_reply(self) -> str:
        """A plausible wrong answer, as a reply."""
        return render_reply(self.wrong, self.answer_format)

    def user_prompt(self) -> str:
        """The user message: the file, the code, the instruction (no marker, no id)."""
        return f"File: {self.filename}\n{fence(self.context)}\n{self.instruction}"

    def messages(self, client: ClientType = "ide_chat") -> list[dict[str, Any]]:
        """OpenAI chat messages as ``client`` sends them: its system prompt, then the user's."""
        return [
            {"role": "system", "content": client_profile(client).system_prompt},
            {"role": "user", "content": self.user_prompt()},
        ]

    def labels(self) -> dict[str, str]:
        """The client's own bookkeeping of the task (family, id, split): never sent."""
        return {"family": self.family, "task_id": self.task_id, "split": self.split}


def render_reply(answer: str, answer_format: AnswerFormat) -> str:
    return fence(answer) if answer_format == "code" else answer.strip()


def extract_answer(reply: str, answer_format: AnswerFormat) -> str | None:
    """The answer inside a model reply (module docstring has the rules); None if malformed."""
    block = _FENCE.search(reply)
    if answer_format == "code":
        if block is None:
            return None
        code = block.group(1)
        return code if code.strip() else None
    text = block.group(1) if block else reply
    for line in text.splitlines():
        stripped = line.strip()
        for quote in ("`", '"', "'"):
            if len(stripped) >= 2 and stripped[0] == stripped[-1] == quote:
                stripped = stripped[1:-1].strip()
        if stripped:
            return stripped
    return None
