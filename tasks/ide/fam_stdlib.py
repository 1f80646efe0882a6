"""Families built on real standard-library functions: name the function, rename a parameter.

Both are short, regular input->output mappings (copy one identifier; copy a snippet with one
substitution), which a tiny model trained on stdlib code can learn.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import random
import re
import textwrap

from tasks.ide.stdlib_source import Snippet, pick_snippet
from tasks.ide.task import AnswerFormat, Task, Verdict, content_split, make_task_id, split_of

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NEW_NAMES: tuple[str, ...] = (
    "value", "item", "entry", "target", "source", "node", "data", "text", "count", "limit",
    "result", "width", "option", "record", "token", "chunk", "key", "element", "field", "label",
)  # fmt: skip


class FunctionName:
    """Return the name of the function defined in a short stdlib snippet."""

    name = "function_name"
    learnable = False  # needs in-context copying: beyond the tiny model (README.md)
    answer_format: AnswerFormat = "line"
    description = "Name the function defined in a <=6-line stdlib snippet (exact identifier)."

    def generate(self, seed: int) -> Task:
        split = split_of(seed)
        rng = random.Random(f"{self.name}:{seed}")
        snippet = pick_snippet(
            rng, lambda s: content_split(s.source) == split, max_lines=6, max_chars=320
        )
        name = snippet.node.name
        others = [a.arg for a in snippet.node.args.args if a.arg != name]
        wrong = others[0] if others else f"{name}_impl"
        return Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=snippet.filename,
            context=snippet.source,
            instruction="What is the name of the function defined above? Reply with just the name.",
            answer_format=self.answer_format,
            reference=name,
            wrong=wrong,
            symbol=name,
        )

    def verify(self, task: Task, answer: str) -> Verdict:
        if answer == task.reference:
            return Verdict(True, "correct")
        if not _IDENTIFIER.match(answer):
            return Verdict(False, "the answer must be a single Python identifier, nothing else")
        if re.search(rf"\b{re.escape(answer)}\b", task.context):
            return Verdict(
                False, f"`{answer}` appears in the snippet but is not the name after `def`"
            )
        return Verdict(False, f"`{answer}` does not appear in the snippet; read the `def` line")


def _renameable(snippet: Snippet) -> list[str]:
    """Parameters whose every textual occurrence is a variable use (so a rename is exact)."""
    out: list[str] = []
    args = snippet.node.args
    for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
        name = arg.arg
        if name in ("self", "cls") or len(name) < 2:
            continue
        uses = sum(
            1
            for node in ast.walk(snippet.node)
            if (isinstance(node, ast.Name) and node.id == name)
            or (isinstance(node, ast.arg) and node.arg == name)
        )
        if uses >= 2 and len(re.findall(rf"\b{name}\b", snippet.source)) == uses:
            out.append(name)
    return out


def _parse_function(code: str) -> ast.Module | str:
    try:
        return ast.parse(textwrap.dedent(code))
    except SyntaxError as exc:
        return f"the reply does not parse: line {exc.lineno}: {exc.msg}"


def _names(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.arg):
            found.add(node.arg)
    return found


class RenameSymbol:
    """Rename one parameter of a short stdlib function everywhere it is used."""

    name = "rename_symbol"
    learnable = False  # needs in-context copying: beyond the tiny model (README.md)
    answer_format: AnswerFormat = "code"
    description = "Rename a parameter in a <=5-line stdlib function (compared by AST)."

    def generate(self, seed: int) -> Task:
        split = split_of(seed)
        rng = random.Random(f"{self.name}:{seed}")
        snippet = pick_snippet(
            rng,
            lambda s: content_split(s.source) == split and bool(_renameable(s)),
            max_lines=5,
            max_chars=300,
        )
        old = rng.choice(_renameable(snippet))
        taken = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", snippet.source))
        fresh = [
            n
            for n in NEW_NAMES
            if n not in taken and not keyword.iskeyword(n) and not hasattr(builtins, n)
        ]
        new = rng.choice(fresh) if fresh else f"{old}_renamed"
        pattern = rf"\b{old}\b"
        reference = re.sub(pattern, new, snippet.source)
        # Plausible slip: only the signature is renamed, the body still uses the old name.
        wrong = re.sub(pattern, new, snippet.source, count=1)
        return Task(
            task_id=make_task_id(self.name, seed),
            family=self.name,
            seed=seed,
            filename=snippet.filename,
            context=snippet.source,
            instruction=(
                f"Rename the parameter `{old}` to `{new}` everywhere in this function. "
                "Reply with the whole updated function in one code block."
            ),
            answer_format=self.answer_format,
            reference=reference,
            wrong=wrong,
            symbol=f"{old}->{new}",
        )

    def verify(self, task: Task, answer: str) -> Verdict:
        old, new = task.symbol.split("->")
        tree = _parse_function(answer)
        if isinstance(tree, str):
            return Verdict(False, tree)
        if ast.dump(tree) == ast.dump(ast.parse(task.reference)):
            return Verdict(True, "correct")
        if ast.dump(tree) == ast.dump(ast.parse(task.context)):
            return Verdict(False, "the code is unchanged; nothing was renamed")
        names = _names(tree)
        if old in names:
            return Verdict(False, f"`{old}` is still used; rename every occurrence to `{new}`")
        if new not in names:
            return Verdict(False, f"`{new}` does not appear in the reply")
        return Verdict(
            False, "the code differs from the original beyond the rename; change nothing else"
        )
