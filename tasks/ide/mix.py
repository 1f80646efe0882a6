"""The fixed traffic mix: which families an IDE session sends, and how often.

The weights below are the documented mix (they sum to 1). Three quarters of the requests are
quick questions, 1/4 each: the type an IDE hover shows, the return type an inlay hint or an
"add annotation" quick fix asks for (with the whole enclosing function as context), the
exception a line raises: the kind a few-M-parameter model learns, and the shape of an IDE
assistant's request volume (many small inline requests for each multi-line edit). The other
quarter are edits and reasoning (naming, renaming, expressions, loop rewrites, completions,
tracing, bug fixes, tests), 1/32 each, which need in-context copying or execution in the head
and stay beyond the tiny model (measured: see README.md).

History: until 2026-11-23 the mix was 1/2 quick questions (hover and exception, 1/4 each) and
1/2 the eight others (1/16 each). With the frontier priced per token, those quick questions
carried only ~35% of the frontier cost, so even serving all of them locally could not cut cost
by half; the flywheel report prints the cost change re-weighted to that old mix too.
Changing a weight changes every benchmark's baseline, so treat it like a schema change.

``sample_tasks(n, seed, split)`` draws ``n`` tasks: each draw picks a family by weight and a task
seed inside the split's seed range, both from one RNG seeded by ``seed`` and ``split``, so a run
is reproducible and train/held-out runs never share a task.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from tasks.ide.families import FAMILIES, get_family
from tasks.ide.task import HELDOUT_SEED_START, SEED_LIMIT, Split, Task

_QUICK = ("expression_type", "return_type", "exception_type")
_OTHERS = (
    "function_name",
    "rename_symbol",
    "eval_expression",
    "loop_to_comprehension",
    "complete_function",
    "trace_output",
    "fix_assertion",
    "write_test",
)

MIX: Mapping[str, float] = {
    **dict.fromkeys(_QUICK, 0.25),
    **dict.fromkeys(_OTHERS, 0.03125),
}

OLD_MIX: Mapping[str, float] = {
    "expression_type": 0.25,
    "exception_type": 0.25,
    **dict.fromkeys(_OTHERS, 0.0625),
}
"""The mix before 2026-11-23 (see the module docstring): reports re-weight to it."""

_SEED_RANGES: Mapping[Split, tuple[int, int]] = {
    "train": (0, HELDOUT_SEED_START),
    "heldout": (HELDOUT_SEED_START, SEED_LIMIT),
}


def check_mix(mix: Mapping[str, float]) -> None:
    """Raise ValueError unless ``mix`` names registered families with weights summing to 1."""
    unknown = sorted(set(mix) - set(FAMILIES))
    if unknown:
        raise ValueError(f"the mix names unknown families: {unknown}")
    if any(w < 0 for w in mix.values()) or abs(sum(mix.values()) - 1.0) > 1e-9:
        raise ValueError("mix weights must be >= 0 and sum to 1")


def sample_tasks(
    n: int, seed: int, split: Split = "train", mix: Mapping[str, float] = MIX
) -> list[Task]:
    """``n`` tasks drawn from ``mix`` in ``split``, reproducibly for ``seed``."""
    if n < 0:
        raise ValueError("n must be >= 0")
    if split not in _SEED_RANGES:
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    check_mix(mix)
    rng = random.Random(f"mix:{seed}:{split}")
    names = sorted(mix)
    weights = [mix[name] for name in names]
    low, high = _SEED_RANGES[split]
    return [
        get_family(rng.choices(names, weights)[0]).generate(rng.randrange(low, high))
        for _ in range(n)
    ]
