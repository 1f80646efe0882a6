"""The oracle: answers IDE task prompts (``tasks.ide``) like a frontier model would.

Prompts carry nothing that names their task (no marker, no tag: the gateway must not learn the
family from them). The oracle knows a task only through a channel the gateway never sees: the
IDE client registers each task with the simulator directly (``POST /sim/oracle`` with
``{"prompt_hash", "task_id"}``, :func:`tasks.ide.prompt_hash` of the user message's text)
before sending it through the gateway. The simulator keeps the registrations in an
:class:`OracleBook`, bounded to ``SimulatorConfig.oracle_capacity`` (oldest forgotten first).

For a registered prompt the oracle regenerates the task (generators are deterministic given the
seed, on the same Python installation) and answers its reference reply with probability
``SimulatorConfig.oracle_accuracy``, else the task's plausible wrong reply. The draw is seeded by
the simulator's seed, the request's seed and choice index, and the task id, so a repeated request
gets the same answer and a run's accept rate is reproducible. A prompt nobody registered (or one
whose task id names no task) is not the oracle's: :func:`oracle_answer` returns None and the
simulator answers its default text.

Agent tasks (``loadtests/agent``, ids ``agent_<kind>:<seed>``) register the same way, keyed by
the user's request; :func:`known_agent_task` finds them for the scripted agent
(``agent_policy.py``), which plays the whole tool-calling episode instead of answering once.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections import OrderedDict
from collections.abc import Iterable

from loadtests.frontier_sim.config import SimulatorConfig
from tasks.agent.tasks import (
    AgentTask,
    agent_task_from_id,
    is_agent_task_id,
    parse_agent_task_id,
)
from tasks.ide.clients import prompt_hash
from tasks.ide.families import FAMILIES, task_from_id
from tasks.ide.task import Task, TaskIdError, parse_task_id

_HASH = re.compile(r"^[0-9a-f]{64}$")


class RegistrationError(ValueError):
    """A registration names no task family or carries a malformed prompt hash."""


class OracleBook:
    """Registered task prompts: :func:`prompt_hash` -> task id, at most ``capacity`` of them.

    Registering a known hash again refreshes it (and replaces its task id); past ``capacity``
    the least recently registered entry is forgotten.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self._tasks: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._tasks)

    def register(self, prompt_hash_hex: str, task_id: str) -> None:
        """Remember ``task_id`` for prompts hashing to ``prompt_hash_hex``.

        Raises :class:`RegistrationError` for a hash that is not 64 lower-case hex digits or a
        task id that is malformed or names no family.
        """
        self.register_all([(prompt_hash_hex, task_id)])

    def register_all(self, entries: Iterable[tuple[str, str]]) -> int:
        """Register ``(prompt_hash, task_id)`` pairs; all are checked before any is kept."""
        checked = list(entries)
        for digest, task_id in checked:
            _check_registration(digest, task_id)
        for digest, task_id in checked:
            self._tasks[digest] = task_id
            self._tasks.move_to_end(digest)
        while len(self._tasks) > self.capacity:
            self._tasks.popitem(last=False)
        return len(checked)

    def task_id_for(self, text: str) -> str | None:
        """The task id registered for the user message ``text``, or None."""
        return self._tasks.get(prompt_hash(text))

    def clear(self) -> None:
        self._tasks.clear()


def _check_registration(digest: str, task_id: str) -> None:
    if not _HASH.match(digest):
        raise RegistrationError("prompt_hash must be 64 lower-case hex digits (sha256)")
    if is_agent_task_id(task_id):
        try:
            parse_agent_task_id(task_id)
        except TaskIdError as exc:
            raise RegistrationError(str(exc)) from exc
        return
    try:
        family, _seed = parse_task_id(task_id)
    except TaskIdError as exc:
        raise RegistrationError(str(exc)) from exc
    if family not in FAMILIES:
        raise RegistrationError(f"no task family named {family!r}")


@functools.lru_cache(maxsize=4096)
def _task(task_id: str) -> Task | None:
    if is_agent_task_id(task_id):
        return None
    try:
        return task_from_id(task_id)
    except (TaskIdError, RuntimeError, ValueError):
        return None


def known_task(text: str, config: SimulatorConfig, book: OracleBook | None) -> Task | None:
    """The registered task whose user message is ``text``, or None (oracle off, unknown)."""
    if not config.oracle or book is None:
        return None
    task_id = book.task_id_for(text)
    return None if task_id is None else _task(task_id)


@functools.lru_cache(maxsize=1024)
def _agent_task(task_id: str) -> AgentTask | None:
    try:
        return agent_task_from_id(task_id)
    except (TaskIdError, RuntimeError, ValueError):
        return None


def known_agent_task(
    text: str, config: SimulatorConfig, book: OracleBook | None
) -> AgentTask | None:
    """The registered agent task whose request is ``text``, or None."""
    if not config.oracle or book is None:
        return None
    task_id = book.task_id_for(text)
    return None if task_id is None or not is_agent_task_id(task_id) else _agent_task(task_id)


def oracle_answer(
    text: str, config: SimulatorConfig, book: OracleBook | None, salt: str = ""
) -> str | None:
    """The reply to the registered task prompt ``text``, or None when it is no known task."""
    task = known_task(text, config, book)
    if task is None:
        return None
    key = f"{config.seed}|{salt}|{task.task_id}".encode()
    draw = random.Random(hashlib.blake2b(key, digest_size=16).digest()).random()
    return task.reference_reply if draw < config.oracle_accuracy else task.wrong_reply
