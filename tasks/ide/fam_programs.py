"""Program families, verified by running code: complete a function, fix a bug, write a test.

- ``complete_function``: the stub is a signature and a one-sentence docstring; the answer is the
  whole function; hidden tests on 8 drawn inputs must pass (a constant or a stub fails).
- ``fix_assertion``: a 4-8 line function with one injected bug and the failing assertion pytest
  printed; the answer is the corrected function; hidden tests on ~10 inputs must pass (special-
  casing the shown input fails).
- ``write_test``: the answer is a test for a correct function; it must pass on that function and
  fail on at least half of the known buggy versions (mutation testing), with at least two asserts
  on calls of the function (``assert True``, an empty test, or a test that checks nothing specific
  fail).
Answers pass :func:`~tasks.ide.verify.static_guard` first and run in the sandbox.
"""

from __future__ import annotations

import ast
import copy
import functools
import math
import random
import textwrap
from collections.abc import Callable
from typing import Any

from tasks.ide.drawing import until_split, workspace_file
from tasks.ide.program_specs import ONE_LINERS, PROGRAMS, Args, Program
from tasks.ide.task import AnswerFormat, Task, Verdict, make_task_id
from tasks.ide.verify import run_python, static_guard

MAX_ATTEMPTS = 100
_MODULES = ("text_tools", "list_tools", "num_tools", "strutil", "seqkit", "helpers_core")
Outcome = tuple[str, Any]


@functools.lru_cache(maxsize=512)
def _load(source: str, fn: str) -> Callable[..., Any]:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<template>", "exec"), namespace)
    function: Callable[..., Any] = namespace[fn]
    return function


def _outcome(source: str, fn: str, args: Args) -> Outcome:
    """Call ``fn`` from ``source`` in-process (our own, terminating templates only)."""
    try:
        return ("ok", _load(source, fn)(*copy.deepcopy(args)))
    except Exception as exc:  # a buggy variant may raise; that is a behaviour too
        return ("raised", type(exc).__name__)


def _same(a: Outcome, b: Outcome) -> bool:
    return a[0] == b[0] and type(a[1]) is type(b[1]) and a[1] == b[1]


def _call_text(fn: str, args: Args) -> str:
    return f"{fn}({', '.join(repr(a) for a in args)})"


def _distinct_args(draw: Any, rng: random.Random, n: int) -> list[Args]:
    seen: dict[str, Args] = {}
    for _ in range(n * 4):
        args = draw(rng)
        seen.setdefault(repr(args), args)
        if len(seen) == n:
            break
    return list(seen.values())


def hidden_tests(module: str, fn: str, cases: list[tuple[Args, Any]]) -> str:
    """Test program: checks each case's result (value and type); the first miss raises."""
    rows = "".join(f"    ({a!r}, {e!r}, {_call_text(fn, a)!r}),\n" for a, e in cases)
    return (
        f"from {module} import {fn}\n\nCASES = [\n{rows}]\n"
        "for args, expected, call in CASES:\n"
        f"    got = {fn}(*args)\n"
        "    if got != expected or type(got) is not type(expected):\n"
        '        raise AssertionError(f"{call} returned {got!r}, expected {expected!r}")\n'
    )


def _run_function_answer(task: Task, answer: str) -> Verdict:
    code = textwrap.dedent(answer)
    problem = static_guard(code)
    if problem is not None:
        return Verdict(False, problem)
    tree = ast.parse(code)
    if not any(isinstance(n, ast.FunctionDef) and n.name == task.symbol for n in tree.body):
        return Verdict(False, f"the reply must define the function `{task.symbol}`")
    result = run_python(task.tests, files={"solution.py": code})
    if result.completed:
        return Verdict(True, "all tests passed")
    return Verdict(False, result.failure_text())


class CompleteFunction:
    """Write the one-line body a docstring describes."""

    name = "complete_function"
    learnable = False  # needs in-context copying: beyond the tiny model (README.md)
    answer_format: AnswerFormat = "code"
    description = "Complete a stub (signature + docstring) with a one-line body; hidden tests."

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng), MAX_ATTEMPTS)

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task] | None:
        spec = rng.choice(ONE_LINERS)
        consts = spec.consts(rng)
        fn = rng.choice(spec.names).format(**consts)
        stub = f'def {fn}({spec.param}):\n    """{spec.doc.format(**consts)}"""\n'
        reference = f"{stub}    return {spec.body.format(**consts)}\n"
        wrong = f"{stub}    return {spec.wrong.format(**consts)}\n"
        args = _distinct_args(lambda r: (spec.arg(r),), rng, 8)
        cases = [(a, _outcome(reference, fn, a)) for a in args]
        if any(o[0] != "ok" for _, o in cases):
            return None
        if all(_same(_outcome(wrong, fn, a), o) for a, o in cases):
            return None
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=workspace_file(rng),
            context=stub,
            instruction=(
                f"Complete the function `{fn}`. Reply with the whole function in one code block."
            ),
            answer_format=self.answer_format,
            reference=reference,
            wrong=wrong,
            symbol=fn,
            tests=hidden_tests("solution", fn, [(a, o[1]) for a, o in cases]),
        )
        return stub, task

    def verify(self, task: Task, answer: str) -> Verdict:
        return _run_function_answer(task, answer)


_Rendered = tuple[str, str, list[tuple[str, str]], dict[str, Any]]


def _render(program: Program, rng: random.Random) -> _Rendered:
    """(function name, reference source, [(mutant source, note)], constants)."""
    consts = program.consts(rng)
    fn = rng.choice(program.names)
    reference = program.source.format(fn=fn, **consts)
    mutants = []
    for old, new, note in program.mutants:
        old_text, new_text = old.format(**consts), new.format(**consts)
        if reference.count(old_text) == 1:
            mutants.append((reference.replace(old_text, new_text), note))
    return fn, reference, mutants, consts


class FixAssertion:
    """Find and fix the bug behind a failing assertion."""

    name = "fix_assertion"
    learnable = False
    answer_format: AnswerFormat = "code"
    description = "Fix one injected bug in a 4-8 line function from a failing assert; hidden tests."

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng), MAX_ATTEMPTS)

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task] | None:
        program = rng.choice(PROGRAMS)
        fn, reference, mutants, consts = _render(program, rng)
        order = list(range(len(mutants)))
        rng.shuffle(order)
        buggy = mutants[order[0]][0]
        args = _distinct_args(lambda r: program.args(r, consts), rng, 10)
        expected = [(a, _outcome(reference, fn, a)) for a in args]
        failing = [(a, o) for a, o in expected if not _same(_outcome(buggy, fn, a), o)]
        if not failing or any(o[0] != "ok" for _, o in expected):
            return None
        shown, want = failing[0][0], failing[0][1][1]
        status, got = _outcome(buggy, fn, shown)
        got_text = f"returned {got!r}" if status == "ok" else f"raised {got}"
        wrong = next(
            (
                source
                for source, _ in (mutants[i] for i in order[1:])
                if any(not _same(_outcome(source, fn, a), o) for a, o in expected)
            ),
            buggy,
        )
        call = _call_text(fn, shown)
        context = f"{buggy.rstrip()}\n\n\ndef test_{fn}():\n    assert {call} == {want!r}\n"
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=workspace_file(rng),
            context=context,
            instruction=(
                f"`pytest` fails:\n    assert {call} == {want!r}\nE   AssertionError: {call} "
                f"{got_text}\nFix the bug in `{fn}` so the test passes. Reply with the corrected "
                "function in one code block."
            ),
            answer_format=self.answer_format,
            reference=reference,
            wrong=wrong,
            symbol=fn,
            tests=hidden_tests("solution", fn, [(a, o[1]) for a, o in expected]),
        )
        return context, task

    def verify(self, task: Task, answer: str) -> Verdict:
        return _run_function_answer(task, answer)


_TEST_HARNESS = """import {module}
namespace = {{"__name__": "test_answer", "{fn}": {module}.{fn}}}
with open("test_answer.py", encoding="utf-8") as f:
    exec(compile(f.read(), "test_answer.py", "exec"), namespace)
tests = [v for k, v in sorted(namespace.items()) if k.startswith("test") and callable(v)]
if not tests:
    raise SystemExit("no test function found")
for test in tests:
    test()
"""


def _perturb(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, value[0] if value else 0]
    return None


class WriteTest:
    """Write a test that passes on a function and catches its likely bugs."""

    name = "write_test"
    learnable = False
    answer_format: AnswerFormat = "code"
    description = "Write asserts for a 4-8 line function; must pass it and kill >=half its mutants."

    def generate(self, seed: int) -> Task:
        return until_split(self.name, seed, lambda rng: self._build(seed, rng), MAX_ATTEMPTS)

    def _build(self, seed: int, rng: random.Random) -> tuple[str, Task] | None:
        program = rng.choice(PROGRAMS)
        fn, reference, mutants, consts = _render(program, rng)
        module = rng.choice(_MODULES)
        args = _distinct_args(lambda r: program.args(r, consts), rng, 12)
        expected = [(a, _outcome(reference, fn, a)) for a in args]
        if any(o[0] != "ok" for _, o in expected):
            return None
        chosen: list[tuple[Args, Any]] = [(expected[0][0], expected[0][1][1])]
        killable: list[tuple[str, str]] = []
        for source, note in mutants:
            killers = [(a, o) for a, o in expected if not _same(_outcome(source, fn, a), o)]
            if killers:
                killable.append((source, note))
                if all(killers[0][0] != c[0] for c in chosen):
                    chosen.append((killers[0][0], killers[0][1][1]))
        if len(killable) < 2:
            return None
        for a, o in expected:
            if len(chosen) >= 3:
                break
            if all(a != c[0] for c in chosen):
                chosen.append((a, o[1]))
        asserts = [f"    assert {_call_text(fn, a)} == {e!r}\n" for a, e in chosen]
        head = f"from {module} import {fn}\n\n\ndef test_{fn}():\n"
        first_args, first_value = chosen[0]
        bad = f"    assert {_call_text(fn, first_args)} == {_perturb(first_value)!r}\n"
        task = Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=f"{module}.py",
            context=reference,
            instruction=(
                f"Write a pytest test function `test_{fn}` for `{fn}` (import it with "
                f"`from {module} import {fn}`), using plain assert statements on concrete "
                "inputs. Reply with the test code in one code block."
            ),
            answer_format=self.answer_format,
            reference=head + "".join(asserts),
            wrong=head + bad + "".join(asserts[1:]),
            symbol=f"{module}.{fn}",
            variants=tuple(s for s, _ in killable),
            variant_notes=tuple(n for _, n in killable),
        )
        return reference, task

    def verify(self, task: Task, answer: str) -> Verdict:
        module, fn = task.symbol.split(".")
        code = textwrap.dedent(answer)
        problem = static_guard(code, extra_imports=(module,))
        if problem is not None:
            return Verdict(False, problem)
        tests = [
            n
            for n in ast.parse(code).body
            if isinstance(n, ast.FunctionDef) and n.name.startswith("test")
        ]
        if not tests:
            return Verdict(False, "define a test function whose name starts with `test_`")
        asserts = [a for t in tests for a in ast.walk(t) if isinstance(a, ast.Assert)]
        if len(asserts) < 2:
            return Verdict(False, "use at least two assert statements")
        if not any(_calls(a, fn) for a in asserts):
            return Verdict(False, f"assert on the results of calling `{fn}`")
        harness = _TEST_HARNESS.format(module=module, fn=fn)
        files = {"test_answer.py": code, f"{module}.py": task.context}
        on_reference = run_python(harness, files=files)
        if not on_reference.completed:
            return Verdict(
                False, "the test fails on the correct function:\n" + on_reference.failure_text()
            )
        needed = math.ceil(len(task.variants) / 2)
        missed: list[str] = []
        for source, note in zip(task.variants, task.variant_notes, strict=True):
            if run_python(harness, files={**files, f"{module}.py": source}).completed:
                missed.append(note)
        kills = len(task.variants) - len(missed)
        if kills >= needed:
            return Verdict(True, f"the test caught {kills} of {len(task.variants)} known bugs")
        return Verdict(
            False, "the test still passes when the function has these bugs: " + "; ".join(missed)
        )


def _calls(node: ast.AST, fn: str) -> bool:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Call):
            target = inner.func
            if (isinstance(target, ast.Name) and target.id == fn) or (
                isinstance(target, ast.Attribute) and target.attr == fn
            ):
                return True
    return False
