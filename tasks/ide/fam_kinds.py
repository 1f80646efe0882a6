"""Quick-question families: one name answers them, decided by the shape of the code.

- ``expression_type``: the type of a one-line expression's value (an IDE hover);
- ``return_type``: the return type of a small function (an IDE inlay hint / "add annotation"
  quick fix); the function comes whole, with its guards and logging, as an IDE sends the
  enclosing function, and its last statement returns an expression of the hover shapes;
- ``exception_type``: the exception a one-line statement raises (an IDE "why does this fail?").

Each answers with one name from a small set, decided by the outermost operator or call of one
expression at the end of the shown code, not by copying from the context or by arithmetic: the
regular, short input -> output mappings a model of a few million parameters learns from a few
hundred examples. The content inside each shape (numbers, words, names) is drawn at random, so
held-out tasks are new code with a known shape. References are computed by evaluating the
generated code in-process: our own tiny grammar, always terminating, no I/O.

The three are one :class:`OneNameFamily` each: a drawing function (random -> code + reference
name) and the wording around it; generation, the train/held-out split and the lenient verifier
are shared.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from tasks.ide.drawing import WORDS, until_split, workspace_file
from tasks.ide.task import AnswerFormat, Task, Verdict, make_task_id

_NAMES = ("count", "total", "label", "size", "width", "offset", "limit", "score", "key", "name")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"

Shape = Callable[[random.Random], str]


def _w(rng: random.Random) -> str:
    return rng.choice(WORDS)


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

# Statements a function does before it returns (guards, logging, bookkeeping): realistic
# context that says nothing about the return type. ``{a}`` is the parameter, ``{w}`` a word.
_PREAMBLE: tuple[str, ...] = (
    "if {a} is None:\n        raise ValueError('{w} is required')",
    "logger.debug('{w}: %r', {a})",
    "if not isinstance({a}, {cls}):\n        raise TypeError(f'expected {cls}, got {{{a}!r}}')",
    "self._{w}_calls += 1",
    "assert {a} is not None, '{w} missing'",
    "if self.closed:\n        raise RuntimeError('{w} is closed')",
    "# {w}: keep in sync with the {w2} schema",
    "warnings.warn('{w} is deprecated; use {w2}', DeprecationWarning, stacklevel=2)",
    "self._last_{w} = {a}",
    "with self._lock:\n        self._pending.discard({a})",
)
_VERBS = ("get", "load", "build", "read", "make", "compute", "parse", "fetch", "lookup", "to")
_CLASSES = ("str", "int", "dict", "list", "bytes")


def _type_name(expression: str) -> str:
    value = eval(compile(expression, "<task>", "eval"), {"__builtins__": __builtins__})
    return type(value).__name__


def _raised(statement: str) -> str | None:
    try:
        exec(compile(statement, "<task>", "exec"), {"__builtins__": __builtins__})
    except Exception as error:  # the point is to name whichever it is
        return type(error).__name__
    return None


def _draw_hover(rng: random.Random) -> tuple[str, str] | None:
    expression = rng.choice(_TYPE_SHAPES)(rng)
    return f"{rng.choice(_NAMES)} = {expression}", _type_name(expression)


def _draw_failing(rng: random.Random) -> tuple[str, str] | None:
    for _ in range(20):
        statement = rng.choice(_RAISE_SHAPES)(rng)
        reference = _raised(statement)
        if reference is not None:
            return statement, reference
    return None  # pragma: no cover - every shape raises by construction


def _draw_function(rng: random.Random) -> tuple[str, str] | None:
    expression = rng.choice(_TYPE_SHAPES)(rng)
    param = rng.choice(_NAMES)
    words = {"a": param, "w": _w(rng), "w2": _w(rng), "cls": rng.choice(_CLASSES)}
    preamble = [line.format(**words) for line in rng.sample(_PREAMBLE, rng.randint(2, 5))]
    body = "\n".join(f"    {line}" for line in [*preamble, f"return {expression}"])
    name = f"{rng.choice(_VERBS)}_{_w(rng)}_{rng.choice(_NAMES)}"
    doc = f"The {_w(rng)} {rng.choice(_NAMES)} for ``{param}``."
    code = f'def {name}(self, {param}):\n    """{doc}"""\n{body}'
    return code, _type_name(expression)


@dataclass(frozen=True, slots=True)
class OneNameFamily:
    """A quick question answered by one name: ``draw(rng) -> (code, reference)`` plus wording.

    ``what`` names the kind of answer in feedback ("type", "exception"), ``pool`` holds the
    plausible answers the wrong reply is drawn from.
    """

    name: str
    description: str
    draw: Callable[[random.Random], tuple[str, str] | None]
    instruction: Callable[[str], str]
    what: str
    pool: tuple[str, ...]
    learnable: bool = True
    answer_format: AnswerFormat = "line"

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng))

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task] | None:
        drawn = self.draw(rng)
        if drawn is None:
            return None
        code, reference = drawn
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=workspace_file(rng),
            context=code,
            instruction=self.instruction(code),
            answer_format=self.answer_format,
            reference=reference,
            wrong=rng.choice([name for name in self.pool if name != reference]),
        )
        return code, task

    def verify(self, task: Task, answer: str) -> Verdict:
        """Exact name, tolerating ``builtins.``, a trailing ``()`` and ``<class '...'>``."""
        name = answer.removeprefix("builtins.").removesuffix("()")
        if name.startswith("<class '") and name.endswith("'>"):
            name = name[len("<class '") : -2]
        if name == task.reference:
            return Verdict(True, "correct")
        if not name.isidentifier():
            return Verdict(False, f"reply with the {self.what} name alone, e.g. `{task.wrong}`")
        return Verdict(
            False, f"`{name}` is not the {self.what} here; look at the outermost operation"
        )


_TYPES = ("int", "float", "str", "list", "bool", "tuple", "dict", "set", "range", "bytes")
_ERRORS = ("ValueError", "TypeError", "IndexError", "KeyError", "AttributeError", "NameError")


def _hover_instruction(code: str) -> str:
    return (
        f"What is the type of `{code.split(' = ', 1)[0]}` after this line runs? Reply with just "
        "the type name, as `type(x).__name__` gives it."
    )


EXPRESSION_TYPE = OneNameFamily(
    name="expression_type",
    description="type(x).__name__ of a one-line expression, decided by its outermost form.",
    draw=_draw_hover,
    instruction=_hover_instruction,
    what="type",
    pool=_TYPES,
)

RETURN_TYPE = OneNameFamily(
    name="return_type",
    description="The return type of a 4-9 line function whose last line returns an expression.",
    draw=_draw_function,
    instruction=lambda _code: (
        "Which return type annotation does this function need? Reply with just the type name, "
        "as `type(x).__name__` gives it for the returned value."
    ),
    what="type",
    pool=_TYPES,
)

EXCEPTION_TYPE = OneNameFamily(
    name="exception_type",
    description="The exception class a failing one-line statement raises.",
    draw=_draw_failing,
    instruction=lambda _code: (
        "Running this line raises an exception. Which exception class? Reply with just the "
        "class name."
    ),
    what="exception",
    pool=_ERRORS,
)
