"""Synthetic snippet families: loop -> comprehension, evaluate an expression, trace a program.

The first two are short and regular (learnable by a tiny model); tracing a loop's effect needs
execution in the head and is meant to stay beyond it. Reference outputs are computed by running
the generated code in-process: it is our own grammar, tiny and always terminating.
"""

from __future__ import annotations

import ast
import io
import random
import textwrap
from collections.abc import Callable
from contextlib import redirect_stdout

from tasks.ide.drawing import WORDS, until_split, workspace_file
from tasks.ide.task import AnswerFormat, Task, Verdict, make_task_id

_RESULTS = ("result", "out", "picked", "values", "kept", "mapped", "collected", "selected")
_SOURCES = ("items", "numbers", "words", "data", "rows", "entries", "records", "parts")
_VARS = ("x", "item", "n", "v", "w", "s", "row", "el")
_EXPRS = (
    "{v}", "{v} * {k}", "{v} + {k}", "{v} - {k}", "str({v})", "{v} ** 2", "abs({v})",
    "({v}, {k})", "{v} // {k}", "-{v}", "[{v}]", "float({v})",
)  # fmt: skip
_CONDS = (
    "{v} > {k}", "{v} < {k}", "{v} % 2 == 0", "{v} % 2 == 1", "{v} != {k}", "{v}",
    "not {v}", "{v} >= {k}", "{v} % {k} == 0",
)  # fmt: skip


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(textwrap.dedent(code).strip())
    except SyntaxError:
        return None


class LoopToComprehension:
    """Rewrite a for loop that appends to a list as one list comprehension."""

    name = "loop_to_comprehension"
    learnable = False  # needs in-context copying: beyond the tiny model (README.md)
    answer_format: AnswerFormat = "code"
    description = "Turn a 3-4 line append loop into `name = [... for ... if ...]` (AST match)."

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng))

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task]:
        res, src, var = rng.choice(_RESULTS), rng.choice(_SOURCES), rng.choice(_VARS)
        k = rng.randint(2, 9)
        expr = rng.choice(_EXPRS).format(v=var, k=k)
        cond = rng.choice(_CONDS).format(v=var, k=k) if rng.random() < 0.6 else None
        if cond:
            loop = f"{res} = []\nfor {var} in {src}:\n    if {cond}:\n        {res}.append({expr})"
            reference = f"{res} = [{expr} for {var} in {src} if {cond}]"
            wrong = f"{res} = [{expr} for {var} in {src}]"
        else:
            loop = f"{res} = []\nfor {var} in {src}:\n    {res}.append({expr})"
            reference = f"{res} = [{expr} for {var} in {src}]"
            wrong = f"{res} = [{var} for {var} in {src}]" if expr != var else f"{res} = {src}"
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=workspace_file(rng),
            context=loop,
            instruction=(
                f"Rewrite this loop as a single list comprehension assigned to `{res}`. "
                "Reply with the one-line replacement in a code block."
            ),
            answer_format=self.answer_format,
            reference=reference,
            wrong=wrong,
            symbol=res,
        )
        return loop, task

    def verify(self, task: Task, answer: str) -> Verdict:
        tree = _parse(answer)
        if tree is None:
            return Verdict(False, "the reply does not parse as Python")
        expected = ast.parse(task.reference)
        if ast.dump(tree) == ast.dump(expected):
            return Verdict(True, "correct")
        body = tree.body
        if len(body) != 1 or not isinstance(body[0], ast.Assign):
            return Verdict(False, f"expected one statement `{task.symbol} = [...]`, no loop")
        got = body[0]
        if not isinstance(got.value, ast.ListComp):
            return Verdict(False, "the value assigned must be a list comprehension `[...]`")
        if ast.dump(got.targets[0]) != ast.dump(ast.Name(task.symbol, ast.Store())):
            return Verdict(False, f"assign the comprehension to `{task.symbol}`")
        want = expected.body[0]
        assert isinstance(want, ast.Assign) and isinstance(want.value, ast.ListComp)
        gen, want_gen = got.value.generators, want.value.generators
        if len(gen) != 1 or ast.dump(gen[0].iter) != ast.dump(want_gen[0].iter):
            return Verdict(False, "iterate over the same source as the loop, with one `for`")
        if ast.dump(got.value.elt) != ast.dump(want.value.elt):
            return Verdict(False, "the element expression differs from what the loop appends")
        if len(gen[0].ifs) != len(want_gen[0].ifs):
            return Verdict(False, "keep the loop's `if` filter, and only it")
        return Verdict(False, "the filter condition differs from the loop's `if`")


def _expression(rng: random.Random) -> str:
    a, b, c = rng.randint(0, 9), rng.randint(1, 9), rng.randint(0, 9)
    word = rng.choice(WORDS)
    forms = (
        f"{a} + {b}",
        f"{a} * {b}",
        f"{a} - {b}",
        f"len('{word}') + {a}",
        f"max({a}, {b}) - {c}",
        f"min({a}, {b}, {c})",
        f"{a * b + c} // {b}",
        f"{a * b + c} % {b}",
        f"'{word}'.upper()",
        f"'{word}'[{a % len(word)}]",
        f"sorted([{a}, {b}, {c}])[1]",
        f"str({a}) + str({b})",
        f"'{word[:2]}' * {1 + a % 3}",
        f"len([{a}, {b}, {c}]) * {b}",
        f"{a} > {b}",
        f"abs({a} - {b + c})",
        f"'{word}'.count('{word[b % len(word)]}')",
        f"sum([{a}, {b}, {c}])",
    )
    return rng.choice(forms)


def _printed(code: str) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        exec(compile(code, "<task>", "exec"), {"__builtins__": __builtins__})
    return out.getvalue().rstrip("\n")


def _wrong_output(value: str, rng: random.Random) -> str:
    if value in ("True", "False"):
        return "False" if value == "True" else "True"
    try:
        number = int(value)
    except ValueError:
        return value[:-1] if len(value) > 1 else value + value
    return str(number + rng.choice((-2, -1, 1, 2)))


def _output_verdict(task: Task, answer: str) -> Verdict:
    if answer == task.reference:
        return Verdict(True, "correct")
    if "print(" in answer:
        return Verdict(False, "reply with the printed output itself, not code")
    ref_is_number = task.reference.lstrip("-").isdigit()
    if ref_is_number and not answer.lstrip("-").isdigit():
        return Verdict(False, f"`{answer}` is not what this prints; the output is an integer")
    return Verdict(False, f"`{answer}` is not what this prints; evaluate it step by step")


class EvalExpression:
    """Predict what ``print(<tiny expression>)`` prints."""

    name = "eval_expression"
    learnable = False  # needs in-context copying: beyond the tiny model (README.md)
    answer_format: AnswerFormat = "line"
    description = "Output of print() of a one-operator expression on digits/short words (exact)."

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng))

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task]:
        code = f"print({_expression(rng)})"
        value = _printed(code)
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=workspace_file(rng),
            context=code,
            instruction="What does running this line print? Reply with just the printed output.",
            answer_format=self.answer_format,
            reference=value,
            wrong=_wrong_output(value, rng),
        )
        return code, task

    def verify(self, task: Task, answer: str) -> Verdict:
        return _output_verdict(task, answer)


def _program(rng: random.Random) -> str:
    a, k, m = rng.randint(0, 5), rng.randint(2, 7), rng.randint(2, 4)
    n, word = rng.randint(4, 9), rng.choice(WORDS)
    nums = [rng.randint(1, 20) for _ in range(rng.randint(3, 6))]
    templates: tuple[Callable[[], str], ...] = (
        lambda: (
            f"""total = {a}
for i in range({n}):
    if i % {m} == {rng.randint(0, m - 1)}:
        total += i * {k}
print(total)"""
        ),
        lambda: (
            f"""n = {rng.randint(3, 12)}
steps = 0
while n > 1:
    n = n // 2 if n % 2 == 0 else 3 * n + 1
    steps += 1
print(steps)"""
        ),
        lambda: (
            f"""word = "{word}"
out = ""
for i, ch in enumerate(word):
    out += ch.upper() if i % {m} == 0 else ch
print(out)"""
        ),
        lambda: (
            f"""nums = {nums}
nums.sort()
nums.append(nums[0] + nums[-1])
print(nums[{rng.randint(0, len(nums) - 1)}] * {m} + len(nums))"""
        ),
        lambda: (
            f"""counts = {{}}
for ch in "{word}{rng.choice(WORDS)}":
    counts[ch] = counts.get(ch, 0) + 1
print(max(counts.values()) * 10 + len(counts))"""
        ),
        lambda: (
            f"""x = 0
for i in range({m + 1}):
    for j in range(i, {n}):
        x += j - i
print(x)"""
        ),
        lambda: (
            f"""def f(a, b={k}):
    return a * b - {a}

print(f({m}) + f({n}, {m}))"""
        ),
        lambda: (
            f"""stack = []
for v in {nums}:
    if stack and v < stack[-1]:
        stack.pop()
    stack.append(v)
print(sum(stack) - len(stack))"""
        ),
    )
    return rng.choice(templates)()


class TraceOutput:
    """Predict the output of a 4-6 line program with loops, branches or a small function."""

    name = "trace_output"
    learnable = False
    answer_format: AnswerFormat = "line"
    description = "Final print of a small loop program (exact); needs simulated execution."

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng))

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task]:
        code = _program(rng)
        value = _printed(code)
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=workspace_file(rng),
            context=code,
            instruction="What does this program print? Reply with just the printed output.",
            answer_format=self.answer_format,
            reference=value,
            wrong=_wrong_output(value, rng),
        )
        return code, task

    def verify(self, task: Task, answer: str) -> Verdict:
        return _output_verdict(task, answer)
