"""Agent tasks of mixed difficulty on generated repositories (``repos.py``).

A task is a repository in some state, the user's request, and the reference solution: the edits
a competent agent makes (each an exact ``old`` -> ``new`` snippet of one file, applied in
order) or, for a question, the answer; and a plausible mistaken solution that fails
(``wrong_edits`` / ``wrong_answer``, what the simulated agent does when it errs). Kinds,
easiest first:

- ``find_definition``: "where is ``f`` defined?"; the answer is ``path:line`` of its ``def``.
  ``f`` is one of the two helpers the report module imports, so a plain search also finds the
  import and the call: the answer must be the definition.
- ``add_import``: the report module lost the import of one helper; the user quotes the
  ``NameError``. One edit puts the import back.
- ``fix_bug``: one token of a tested helper was changed (an operator, a comparison, a constant, a
  builtin); the user names the failing test. One edit restores the line.
- ``rename_symbol``: rename a helper the report module imports, in its module and in the report
  (definition, import, call): three edits in two files. The new name is another of the helper's
  names in the task's split, so held-out tasks stay free of train-split names.
- ``implement``: a tested helper's body is ``raise NotImplementedError``; the user names the
  failing test. The docstring and the test say what to write.

Task ids are ``agent_<kind>:<seed>`` (client-side bookkeeping and the simulator's oracle channel
only; never sent to the gateway). Seeds split as the IDE task families' do
(:func:`tasks.ide.task.split_of`). ``expected_learnable`` is our prior of what the tiny
local model can learn (short, regular trajectories); the flywheel measures it.
"""

from __future__ import annotations

import ast
import io
import random
import re
import tokenize
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from tasks.agent.repos import PlacedHelper, Repo, generate_repo
from tasks.ide.task import HELDOUT_SEED_START, SEED_LIMIT, Split, TaskIdError, split_of

AgentKind = Literal["find_definition", "add_import", "fix_bug", "rename_symbol", "implement"]
AGENT_KINDS: tuple[AgentKind, ...] = get_args(AgentKind)
Check = Literal["answer", "tests"]
TASK_PREFIX = "agent_"

EXPECTED_LEARNABLE: Mapping[AgentKind, bool] = {
    "find_definition": True,
    "add_import": True,
    "fix_bug": True,
    "rename_symbol": False,
    "implement": False,
}

# One-token mutations a test will notice: token -> what it becomes.
_MUTATIONS: Mapping[str, str] = {
    "+": "-", "-": "+", "*": "+", "/": "*", "<": "<=", "<=": "<", ">": ">=", ">=": ">",
    "==": "!=", "!=": "==", "max": "min", "min": "max", "0": "1", "1": "2", "2": "3",
    "upper": "lower", "lower": "upper", "and": "or", "or": "and",
}  # fmt: skip
_TASK_ID = re.compile(rf"^{TASK_PREFIX}([a-z_]+):(\d+)$")


@dataclass(frozen=True, slots=True)
class FileEdit:
    """Replace the one occurrence of ``old`` in ``path`` with ``new``."""

    path: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class AgentTask:
    """One agent task (see the module docstring); ``files`` is the repository it starts from."""

    task_id: str
    kind: AgentKind
    seed: int
    prompt: str
    files: Mapping[str, str]
    check: Check
    edits: tuple[FileEdit, ...] = ()
    answer: str = ""
    symbol: str = ""
    new_name: str = ""
    test_paths: tuple[str, ...] = ()  # the tests the request is about
    module: str = ""  # the file the change belongs in
    wrong_edits: tuple[FileEdit, ...] = ()  # a plausible mistaken solution (it fails)
    wrong_answer: str = ""

    @property
    def split(self) -> Split:
        return split_of(self.seed)

    @property
    def expected_learnable(self) -> bool:
        return EXPECTED_LEARNABLE[self.kind]

    @property
    def test_files(self) -> dict[str, str]:
        """The repository's test files as the task gave them (what the verifier runs)."""
        return {p: t for p, t in self.files.items() if p.startswith("tests/")}

    def solved_files(self) -> dict[str, str]:
        """The files after the reference edits (raises ValueError if one does not apply)."""
        files = dict(self.files)
        for edit in self.edits:
            files[edit.path] = apply_edit(files[edit.path], edit.old, edit.new)
        return files

    def labels(self) -> dict[str, str]:
        """The client's own bookkeeping (never sent)."""
        return {"kind": self.kind, "task_id": self.task_id, "split": self.split}


def apply_edit(text: str, old: str, new: str) -> str:
    """``text`` with its single occurrence of ``old`` replaced; ValueError otherwise."""
    count = text.count(old)
    if count != 1:
        raise ValueError(f"expected one occurrence of the snippet, found {count}")
    return text.replace(old, new, 1)


def task_id_of(kind: AgentKind, seed: int) -> str:
    return f"{TASK_PREFIX}{kind}:{seed}"


def parse_agent_task_id(task_id: str) -> tuple[AgentKind, int]:
    """``(kind, seed)`` of an agent task id; raises :class:`TaskIdError`."""
    match = _TASK_ID.match(task_id)
    if not match or match.group(1) not in AGENT_KINDS:
        raise TaskIdError(f"not an agent task id: {task_id!r}")
    seed = int(match.group(2))
    if seed >= SEED_LIMIT:
        raise TaskIdError(f"task id {task_id!r} has a seed beyond {SEED_LIMIT}")
    kind: AgentKind = match.group(1)  # type: ignore[assignment]
    return kind, seed


def is_agent_task_id(task_id: str) -> bool:
    return task_id.startswith(TASK_PREFIX)


def def_line(source: str, name: str) -> int:
    """The 1-based line of ``def name(`` in ``source``."""
    for number, line in enumerate(source.splitlines(), 1):
        if line.startswith(f"def {name}("):
            return number
    raise ValueError(f"no definition of {name}")


def _find_definition(repo: Repo, rng: random.Random, task_id: str, seed: int) -> AgentTask:
    target = rng.choice((repo.report_numeric, repo.report_text))
    line = def_line(repo.files[target.module], target.name)
    prompt = (
        f"Where is the function `{target.name}` defined? Reply with its file path and line "
        "number as path:line (for example src/app.py:10)."
    )
    report = repo.files[repo.report_module].splitlines()
    import_line = next(n for n, text in enumerate(report, 1) if text.endswith(f" {target.name}"))
    return AgentTask(
        task_id, "find_definition", seed, prompt, repo.files, "answer",
        answer=f"{target.module}:{line}", symbol=target.name, module=target.module,
        wrong_answer=f"{repo.report_module}:{import_line}",
    )  # fmt: skip


def _import_line(repo: Repo, helper: PlacedHelper) -> str:
    module = helper.module.removesuffix(".py").replace("/", ".")
    return f"from {module} import {helper.name}\n"


def _add_import(repo: Repo, rng: random.Random, task_id: str, seed: int) -> AgentTask:
    missing = rng.choice((repo.report_numeric, repo.report_text))
    kept = repo.report_text if missing is repo.report_numeric else repo.report_numeric
    missing_line, kept_line = _import_line(repo, missing), _import_line(repo, kept)
    files = dict(repo.files)
    files[repo.report_module] = apply_edit(files[repo.report_module], missing_line, "")
    new = kept_line + missing_line if missing is repo.report_text else missing_line + kept_line
    prompt = (
        f"Running the tests fails with `NameError: name '{missing.name}' is not defined`. "
        "Add the missing import so the tests pass."
    )
    # The mistake: the name imported from the report's other helper module.
    wrong_line = kept_line.split(" import ")[0] + f" import {missing.name}\n"
    wrong = kept_line + wrong_line if missing is repo.report_text else wrong_line + kept_line
    return AgentTask(
        task_id, "add_import", seed, prompt, files, "tests",
        edits=(FileEdit(repo.report_module, kept_line, new),), symbol=missing.name,
        test_paths=(repo.test_path(repo.report_module),), module=repo.report_module,
        wrong_edits=(FileEdit(repo.report_module, kept_line, wrong),),
    )  # fmt: skip


def one_token_mutations(line: str) -> list[str]:
    """Lines differing from ``line`` in one token (see ``_MUTATIONS``)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError):
        return []
    indent = line[: len(line) - len(line.lstrip())]
    body = line.strip()
    out = []
    for tok in tokens:
        replacement = _MUTATIONS.get(tok.string)
        if replacement is None or tok.type not in (tokenize.OP, tokenize.NAME, tokenize.NUMBER):
            continue
        start, end = tok.start[1], tok.end[1]
        out.append(indent + body[:start] + replacement + body[end:])
    return out


def _fails(source: str, helper: PlacedHelper) -> bool:
    """Whether ``source`` (one module) fails one of the helper's test calls."""
    reference: dict[str, object] = {}
    mutated: dict[str, object] = {}
    original = helper.source()
    try:
        exec(compile(original, "<ref>", "exec"), reference)  # our own generated source
        exec(compile(source, "<mut>", "exec"), mutated)
        for call in helper.helper.calls:
            want = eval(f"{helper.name}({call})", reference)
            try:
                got = eval(f"{helper.name}({call})", mutated)
            except Exception:
                return True
            if got != want:
                return True
    except SyntaxError:
        return False
    return False


def _fix_bug(repo: Repo, rng: random.Random, task_id: str, seed: int) -> AgentTask:
    helpers = list(repo.directly_tested())
    rng.shuffle(helpers)
    for helper in helpers:
        source = repo.files[helper.module]
        body_lines = helper.helper.body.splitlines()
        candidates = [
            (line, mutated)
            for line in body_lines
            if source.count(line) == 1
            for mutated in one_token_mutations(line)
            if source.count(mutated) == 0
            and _fails(helper.source().replace(line, mutated, 1), helper)
        ]
        if not candidates:
            continue
        line, mutated = rng.choice(candidates)
        # The mistake: another token of the broken line changed, the bug left in place.
        wrong = [
            m for m in one_token_mutations(mutated) if m != line and source.count(m) == 0
            and _fails(helper.source().replace(line, m, 1), helper)
        ]  # fmt: skip
        files = dict(repo.files)
        files[helper.module] = apply_edit(source, line, mutated)
        test_path = repo.test_path(helper.module)
        prompt = (
            f"The test `{test_path}::test_{helper.name}` fails. Find the bug in the code and fix "
            "it; do not change the tests."
        )
        return AgentTask(
            task_id, "fix_bug", seed, prompt, files, "tests",
            edits=(FileEdit(helper.module, mutated, line),), symbol=helper.name,
            test_paths=(test_path,), module=helper.module,
            wrong_edits=(FileEdit(helper.module, mutated, rng.choice(wrong)),) if wrong else (),
        )  # fmt: skip
    raise RuntimeError(f"no mutable helper in repository {repo.seed}")


def _rename_symbol(repo: Repo, rng: random.Random, task_id: str, seed: int) -> AgentTask:
    target = rng.choice((repo.report_numeric, repo.report_text))
    taken = {h.name for h in repo.helpers} | {repo.describe, repo.tabulate}
    new_name = rng.choice([n for n in target.helper.names_in(repo.split) if n not in taken])
    old, module = target.name, target.module
    report = repo.files[repo.report_module]
    usage = next(line for line in report.splitlines(keepends=True) if f"{old}(" in line)
    import_line = _import_line(repo, target)
    edits = (
        FileEdit(module, f"def {old}(", f"def {new_name}("),
        FileEdit(repo.report_module, import_line, import_line.replace(old, new_name)),
        FileEdit(repo.report_module, usage, usage.replace(f"{old}(", f"{new_name}(")),
    )
    prompt = (
        f"Rename the function `{old}` to `{new_name}` everywhere in the repository (its "
        "definition and every use), and keep the tests passing."
    )
    return AgentTask(
        task_id, "rename_symbol", seed, prompt, repo.files, "tests",
        edits=edits, symbol=old, new_name=new_name, module=module,
        test_paths=(repo.test_path(repo.report_module),),
        wrong_edits=edits[:2],  # the mistake: the call site is left out
    )  # fmt: skip


def _implement(repo: Repo, rng: random.Random, task_id: str, seed: int) -> AgentTask:
    helper = rng.choice(repo.directly_tested())
    body = helper.helper.body + "\n"
    stub = "    raise NotImplementedError\n"
    files = dict(repo.files)
    files[helper.module] = apply_edit(files[helper.module], body, stub)
    test_path = repo.test_path(helper.module)
    prompt = (
        f"`{test_path}::test_{helper.name}` fails because `{helper.name}` is not implemented "
        "yet. Implement it so the test passes, without changing the test."
    )
    # The stub line is in several functions only if two are stubs; it is unique here, but the
    # edit anchors on the signature and docstring too, as an agent quoting the function would.
    anchor = f'def {helper.name}({helper.helper.params}):\n    """{helper.helper.doc}"""\n'
    # The mistake: an implementation with a one-token bug the test catches.
    buggy = [
        body.replace(line, m, 1)
        for line in body.splitlines()
        for m in one_token_mutations(line)
        if _fails(helper.source().replace(line, m, 1), helper)
    ]
    wrong = (FileEdit(helper.module, anchor + stub, anchor + rng.choice(buggy)),) if buggy else ()
    return AgentTask(
        task_id, "implement", seed, prompt, files, "tests",
        edits=(FileEdit(helper.module, anchor + stub, anchor + body),), symbol=helper.name,
        test_paths=(test_path,), module=helper.module, wrong_edits=wrong,
    )  # fmt: skip


_BUILDERS: Mapping[AgentKind, Callable[[Repo, random.Random, str, int], AgentTask]] = {
    "find_definition": _find_definition,
    "add_import": _add_import,
    "fix_bug": _fix_bug,
    "rename_symbol": _rename_symbol,
    "implement": _implement,
}


def make_agent_task(kind: AgentKind, seed: int) -> AgentTask:
    """The task of ``kind`` on the repository of ``seed`` (deterministic)."""
    split_of(seed)  # raises ValueError outside the seed range
    rng = random.Random(f"agent-task:{kind}:{seed}")
    return _BUILDERS[kind](generate_repo(seed), rng, task_id_of(kind, seed), seed)


def agent_task_from_id(task_id: str) -> AgentTask:
    kind, seed = parse_agent_task_id(task_id)
    return make_agent_task(kind, seed)


def sample_agent_tasks(
    n: int, seed: int, split: Split = "train", kinds: Sequence[AgentKind] = AGENT_KINDS
) -> list[AgentTask]:
    """``n`` tasks, kinds drawn uniformly from ``kinds``, seeds in ``split``'s range."""
    unknown = set(kinds) - set(AGENT_KINDS)
    if unknown or not kinds:
        raise ValueError(f"kinds must be among {AGENT_KINDS}, got {list(kinds)}")
    rng = random.Random(f"agent-sample:{seed}:{split}")
    low, high = (0, HELDOUT_SEED_START) if split == "train" else (HELDOUT_SEED_START, SEED_LIMIT)
    return [make_agent_task(rng.choice(kinds), rng.randrange(low, high)) for _ in range(n)]


def heldout_task_ids(n: int, seed: int, kinds: Sequence[AgentKind] = AGENT_KINDS) -> list[str]:
    """``n`` task ids of the held-out split (seeds never trained on), kinds drawn from ``kinds``:
    the agent gate's tasks."""
    return [t.task_id for t in sample_agent_tasks(n, seed, "heldout", kinds)]


def identifiers(source: str) -> set[str]:
    """Names bound or used in ``source`` (definitions, imports, references); empty if it does
    not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
    return names
