"""Synthetic IDE traffic for the request scorer's tests and its benchmark's tests.

Tasks from ``tasks.ide`` as a real client sends them (one fixed system prompt for every family, no
``# task:`` marker line, half of them with an agent's tool list), so only the user's text tells
the families apart. "Local accepted" is drawn per family with a seeded RNG; the frontier is
accepted 97% of the time.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from functools import cache

from router.request_text import RequestText
from router.scorer import Example
from tasks.ide import Task, sample_tasks

SYSTEM = (
    "You are a coding assistant inside the user's IDE. Each request shows the file the user is "
    "editing and one instruction. Do exactly what the instruction asks."
)
AGENT_TOOLS = ("read_file", "list_dir", "search", "apply_patch", "run_tests")
P_FRONTIER = 0.97
# the brief's rates: even the true per-family probabilities rank held-out labels at AUC ~0.85
P_LOCAL: Mapping[str, float] = {"expression_type": 0.9, "return_type": 0.8, "exception_type": 0.7}
P_OTHER = 0.05
# rates separated enough for a ranking above 0.9 to exist (true probabilities: ~0.93)
P_LOCAL_SHARP: Mapping[str, float] = {
    "expression_type": 0.97,
    "return_type": 0.93,
    "exception_type": 0.9,
}
P_OTHER_SHARP = 0.03


def request_text(task: Task, agent: bool) -> RequestText:
    """What a gateway fills from the task's chat messages: a fixed system prompt, no marker."""
    user = str(task.messages()[-1]["content"])
    if user.startswith("# task: "):
        user = user.split("\n", 1)[1] if "\n" in user else ""
    tools = AGENT_TOOLS if agent else ()
    return RequestText(
        system=SYSTEM,
        last_user=user,
        turns=2,
        tool_names=tools,
        prompt_chars=len(SYSTEM) + len(user),
        has_tools=agent,
    )


@cache
def _tasks(n: int, seed: int, split: str) -> tuple[tuple[Task, RequestText], ...]:
    rng = random.Random(f"client:{seed}:{split}")
    tasks = sample_tasks(n, seed, split)  # type: ignore[arg-type]
    return tuple((t, request_text(t, rng.random() < 0.5)) for t in tasks)


def synthetic(
    n: int,
    seed: int,
    split: str,
    p_local: Mapping[str, float] = P_LOCAL,
    p_other: float = P_OTHER,
) -> tuple[list[Example], list[float]]:
    """Local-arm examples with labels drawn at each family's rate, and those true rates."""
    rng = random.Random(f"labels:{seed}:{split}:{sorted(p_local.items())}:{p_other}")
    examples, rates = [], []
    for task, text in _tasks(n, seed, split):
        p = p_local.get(task.family, p_other)
        examples.append(Example(text, rng.random() < p, "local"))
        rates.append(p)
    return examples, rates


def frontier_examples(texts: Sequence[RequestText], seed: int) -> list[Example]:
    rng = random.Random(f"frontier:{seed}")
    return [Example(t, rng.random() < P_FRONTIER, "frontier") for t in texts]


def train_examples() -> list[Example]:
    """The fit set of the tests: 1,500 local examples and 300 frontier ones."""
    examples, _ = synthetic(1500, 1, "train")
    return examples + frontier_examples([e.text for e in examples[:300]], 1)


def heldout_examples(
    p_local: Mapping[str, float] = P_LOCAL, p_other: float = P_OTHER
) -> tuple[list[Example], list[float]]:
    return synthetic(500, 2, "heldout", p_local, p_other)
