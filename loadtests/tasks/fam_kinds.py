"""Quick-question families: the type of an expression (an IDE hover) and the exception a line
raises (an IDE "why does this fail?").

Both answer with one name from a small set, decided by the shape of the code (the outermost
operator or call), not by copying from the context or by arithmetic: the regular, short
input -> output mappings a model of a few million parameters learns from a few hundred examples.
The content inside each shape (numbers, words, names) is drawn at random, so held-out tasks are
new code with a known shape. References are computed by evaluating the generated code
in-process: our own tiny grammar, always terminating, no I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from loadtests.tasks.fam_snippets import _WORDS, _until_split
from loadtests.tasks.task import AnswerFormat, Task, Verdict, make_task_id

_NAMES = ("count", "total", "label", "size", "width", "offset", "limit", "score", "key", "name")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"

Shape = Callable[[random.Random], str]


def _w(rng: random.Random) -> str:
    return rng.choice(_WORDS)


def _d(rng: random.Random, low: int = 0, high: int = 9) -> int:
    return rng.randint(low, high)


_TYPE_SHAPES: tuple[Shape, ...] = (
    lambda r: f"len('{_w(r)}')",
    lambda r: f"{_d(r)} + {_d(r)}",
    lambda r: f"{_d(r)} / {_d(r, 1)}",
    lambda r: f"{_d(r, 10, 99)} // {_d(r, 1)}",
    lambda r: f"'{_w(r)}'.upper()",
    lambda r: f"'{_w(r)}'.split('{r.choice(_LETTERS)}')",
    lambda r: f"{_d(r)} > {_d(r)}",
    lambda r: f"'{r.choice(_LETTERS)}' in '{_w(r)}'",
    lambda r: f"({_d(r)}, {_d(r)})",
    lambda r: f"{{'{_w(r)}': {_d(r)}}}",
    lambda r: f"{{{_d(r)}, {_d(r, 10, 19)}}}",
    lambda r: f"str({_d(r, 0, 999)})",
    lambda r: f"sorted('{_w(r)}')",
    lambda r: f"'{_w(r)}'.find('{r.choice(_LETTERS)}')",
    lambda r: f"[{_d(r)}] * {_d(r, 1)}",
    lambda r: f"{_d(r, 1)} ** 0.5",
    lambda r: f"range({_d(r, 1)})",
    lambda r: f"'{_w(r)}'.encode()",
    lambda r: f"divmod({_d(r, 10, 99)}, {_d(r, 1)})",
    lambda r: f"'{_w(r)}'.isdigit()",
    lambda r: f"max([{_d(r)}, {_d(r)}, {_d(r)}])",
    lambda r: f"'-'.join(['{_w(r)}', '{_w(r)}'])",
    lambda r: f"float({_d(r, 0, 99)})",
    lambda r: f"{{n: n * {_d(r, 1)} for n in range({_d(r, 1)})}}",
    lambda r: f"[n for n in range({_d(r, 1)}) if n > {_d(r)}]",
    lambda r: f"print('{_w(r)}') if False else None",
)

_RAISE_SHAPES: tuple[Shape, ...] = (
    lambda r: f"int('{_w(r)}')",
    lambda r: f"float('{_w(r)}')",
    lambda r: f"[{_d(r)}, {_d(r)}][{_d(r, 2, 9)}]",
    lambda r: f"'{_w(r)}'[{_d(r, 10, 40)}]",
    lambda r: f"{{'{_w(r)}': {_d(r)}}}['{r.choice(_NAMES)}']",
    lambda r: f"{_d(r)} / 0",
    lambda r: f"{_d(r, 1)} % 0",
    lambda r: f"'{_w(r)}' + {_d(r)}",
    lambda r: f"len({_d(r)})",
    lambda r: f"({_d(r)}, {_d(r)})[0] = {_d(r)}",
    lambda r: f"None.{r.choice(_NAMES)}",
    lambda r: f"({_d(r)}).append({_d(r)})",
    lambda r: f"{r.choice(_NAMES)}_{_w(r)} + {_d(r)}",
    lambda r: f"import {_w(r)}_{r.choice(_NAMES)}_missing",
    lambda r: f"[{_d(r, 0, 4)}, {_d(r, 0, 4)}].remove({_d(r, 5, 9)})",
    lambda r: f"next(iter([n for n in range({_d(r)}) if n > 9]))",
    lambda r: f"'{_w(r)}'.index('z')",
    lambda r: f"{{}}.pop('{_w(r)}')",
    lambda r: "[].pop()",
    lambda r: f"sum(['{_w(r)}', '{_w(r)}'])",
    lambda r: f"assert {_d(r)} > {_d(r, 10, 20)}",
)


def _type_name(expression: str) -> str:
    value = eval(compile(expression, "<task>", "eval"), {"__builtins__": __builtins__})
    return type(value).__name__


def _raised(statement: str) -> str | None:
    try:
        exec(compile(statement, "<task>", "exec"), {"__builtins__": __builtins__})
    except Exception as error:  # the point is to name whichever it is
        return type(error).__name__
    return None


def _name_verdict(task: Task, answer: str, what: str) -> Verdict:
    name = answer.removeprefix("builtins.").removesuffix("()")
    if name.startswith("<class '") and name.endswith("'>"):
        name = name[len("<class '") : -2]
    if name == task.reference:
        return Verdict(True, "correct")
    if not name.isidentifier():
        return Verdict(False, f"reply with the {what} name alone, e.g. `{task.wrong}`")
    return Verdict(False, f"`{name}` is not the {what} here; look at the outermost operation")


def _wrong(reference: str, pool: tuple[str, ...], rng: random.Random) -> str:
    return rng.choice([name for name in pool if name != reference])


_TYPES = ("int", "float", "str", "list", "bool", "tuple", "dict", "set", "range", "bytes")
_ERRORS = ("ValueError", "TypeError", "IndexError", "KeyError", "AttributeError", "NameError")


class ExpressionType:
    """Name the type of a one-line expression's value (what an IDE hover shows)."""

    name = "expression_type"
    learnable = True
    answer_format: AnswerFormat = "line"
    description = "type(x).__name__ of a one-line expression, decided by its outermost form."

    def generate(self, seed: int) -> Task:
        return _until_split(self.name, seed, lambda rng: self._build(seed, rng))

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task]:
        expression = rng.choice(_TYPE_SHAPES)(rng)
        name = rng.choice(_NAMES)
        code = f"{name} = {expression}"
        reference = _type_name(expression)
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=f"{_w(rng)}_hover.py",
            context=code,
            instruction=(
                f"What is the type of `{name}` after this line runs? Reply with the type name "
                "only, as `type(x).__name__` gives it."
            ),
            answer_format=self.answer_format,
            reference=reference,
            wrong=_wrong(reference, _TYPES, rng),
        )
        return code, task

    def verify(self, task: Task, answer: str) -> Verdict:
        return _name_verdict(task, answer, "type")


class ExceptionType:
    """Name the exception a one-line statement raises."""

    name = "exception_type"
    learnable = True
    answer_format: AnswerFormat = "line"
    description = "The exception class a failing one-line statement raises."

    def generate(self, seed: int) -> Task:
        return _until_split(self.name, seed, lambda rng: self._build(seed, rng))

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task]:
        for _ in range(20):
            statement = rng.choice(_RAISE_SHAPES)(rng)
            reference = _raised(statement)
            if reference is not None:
                break
        else:  # pragma: no cover - every shape raises by construction
            raise RuntimeError("no raising statement drawn")
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=f"{_w(rng)}_debug.py",
            context=statement,
            instruction=(
                "Running this line raises an exception. Which exception class? Reply with the "
                "class name only."
            ),
            answer_format=self.answer_format,
            reference=reference,
            wrong=_wrong(reference, _ERRORS, rng),
        )
        return statement, task

    def verify(self, task: Task, answer: str) -> Verdict:
        return _name_verdict(task, answer, "exception")
