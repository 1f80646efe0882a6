"""The task families' verifiers as `make flywheel` (scripts/flywheel.py) injects them into the RL
loop (which never imports the task families), and the held-out items of its gate."""

from __future__ import annotations

import functools
from typing import Any

from rl_loop.evaluate import EvalItem
from tasks.ide import FAMILIES, task_from_id, verify_reply
from tasks.ide.task import HELDOUT_SEED_START, Task, TaskIdError, extract_answer


def _task(task_id: str) -> Task | None:
    try:
        return task_from_id(task_id)
    except (TaskIdError, ValueError, RuntimeError):
        return None


@functools.lru_cache(maxsize=65536)
def _verdict(task_id: str, answer: str) -> tuple[bool, str]:
    task = _task(task_id)
    if task is None:
        return False, f"unknown task {task_id!r}"
    verdict = verify_reply(task, answer)
    return verdict.passed, verdict.feedback


def verify(tags: Any, answer: str) -> tuple[bool, str]:
    """The task families' verifier, by the request's ``task_id`` tag (memoised)."""
    return _verdict(str(tags.get("task_id", "")), answer)


def strict_verify(tags: Any, answer: str) -> tuple[bool, str]:
    """Stricter re-check: the verifier, and the reply is exactly in the asked format (one line
    and nothing else, or one fenced block and nothing outside it)."""
    passed, feedback = verify(tags, answer)
    task = _task(str(tags.get("task_id", "")))
    if not passed or task is None:
        return passed, feedback
    text = answer.strip()
    if task.answer_format == "line":
        exact = "\n" not in text and "```" not in text
    else:
        exact = text.startswith("```") and text.endswith("```") and text.count("```") == 2
    ok = exact and extract_answer(answer, task.answer_format) is not None
    return ok, "correct" if ok else "correct answer wrapped in extra text"


def heldout_items(per_family: int) -> list[EvalItem]:
    """Tasks of the held-out split (never sent as traffic), the same each round."""
    items = []
    for name in sorted(FAMILIES):
        for i in range(per_family):
            task = FAMILIES[name].generate(HELDOUT_SEED_START + 7919 * i + 1)
            items.append(EvalItem(task.messages(), task.labels(), "heldout"))
    return items
