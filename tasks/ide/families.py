"""The family protocol and the registry of task families.

A family is a named, deterministic task generator plus the verifier of its answers:
``generate(seed)`` always returns the same :class:`~tasks.ide.task.Task` for a seed (on one
Python installation), ``verify(task, answer)`` judges an extracted answer. Replies go through
:func:`verify_reply`, which extracts the answer by the family's format first (a malformed reply
fails with a feedback saying what was expected). ``learnable`` is our expectation of whether a
tiny model trained for minutes on a few thousand examples reaches high accuracy on the family.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Protocol

from tasks.ide.fam_kinds import EXCEPTION_TYPE, EXPRESSION_TYPE, RETURN_TYPE
from tasks.ide.fam_programs import CompleteFunction, FixAssertion, WriteTest
from tasks.ide.fam_snippets import EvalExpression, LoopToComprehension, TraceOutput
from tasks.ide.fam_stdlib import FunctionName, RenameSymbol
from tasks.ide.task import (
    AnswerFormat,
    Task,
    TaskIdError,
    Verdict,
    extract_answer,
    parse_task_id,
)


class Family(Protocol):
    """A task family: generator and verifier (see the module docstring for the contract)."""

    @property
    def name(self) -> str: ...

    @property
    def learnable(self) -> bool: ...

    @property
    def answer_format(self) -> AnswerFormat: ...

    @property
    def description(self) -> str: ...

    def generate(self, seed: int) -> Task: ...

    def verify(self, task: Task, answer: str) -> Verdict: ...


def _registry(*families: Family) -> Mapping[str, Family]:
    return {family.name: family for family in families}


FAMILIES: Mapping[str, Family] = _registry(
    EXPRESSION_TYPE,
    RETURN_TYPE,
    EXCEPTION_TYPE,
    FunctionName(),
    RenameSymbol(),
    EvalExpression(),
    LoopToComprehension(),
    CompleteFunction(),
    TraceOutput(),
    FixAssertion(),
    WriteTest(),
)

_MALFORMED: dict[AnswerFormat, str] = {
    "line": "the reply is empty; answer on a single line",
    "code": "the reply has no fenced code block; put the code in ```python ... ```",
}


def get_family(name: str) -> Family:
    """The registered family ``name``; raises :class:`TaskIdError` if there is none."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise TaskIdError(f"no task family named {name!r}") from None


def task_from_id(task_id: str) -> Task:
    """Regenerate a task from its id (``family:seed``); raises :class:`TaskIdError`."""
    family, seed = parse_task_id(task_id)
    return get_family(family).generate(seed)


# CPython 3.11's `ast.parse` is not thread-safe ("AST constructor recursion depth mismatch" when
# two threads parse at once), and the verifiers parse answers while callers verify in worker
# threads (the IDE client's `asyncio.to_thread`; the RL loop's gate and refit, beside it in the
# flywheel's process). The hazard is the interpreter's, so the lock is the process's.
_VERIFY_LOCK = threading.Lock()


def verify_reply(task: Task, reply: str) -> Verdict:
    """Judge a model's full reply to ``task``: extract the answer, then run the family's check.
    Safe to call from several threads: verifications run one at a time."""
    answer = extract_answer(reply, task.answer_format)
    if answer is None:
        return Verdict(False, _MALFORMED[task.answer_format])
    with _VERIFY_LOCK:
        return get_family(task.family).verify(task, answer)
