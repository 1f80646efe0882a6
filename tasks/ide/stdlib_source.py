"""Short functions taken from the Python standard library's own sources, as task material.

The pool is the top-level ``*.py`` files of ``sysconfig.get_paths()["stdlib"]`` in sorted order.
A seed picks a file, the file is parsed once per process (cached) and its functions that pass a
family's filter are candidates; the seed then picks one. Tasks are therefore deterministic for a
given Python installation (the simulator's oracle and the IDE client must share it).

A snippet is a function's own source lines, dedented, if it is plain ASCII, has no decorators,
no nested function or class, and fits the size limits.
"""

from __future__ import annotations

import ast
import functools
import random
import sysconfig
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MAX_FILE_ATTEMPTS = 64


@dataclass(frozen=True, slots=True)
class Snippet:
    """One function's source and where it came from."""

    module: str
    qualname: str
    source: str
    node: ast.FunctionDef

    @property
    def filename(self) -> str:
        return f"{self.module}.py"


@functools.cache
def stdlib_files() -> tuple[Path, ...]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return tuple(sorted(p for p in root.glob("*.py") if p.is_file()))


@functools.lru_cache(maxsize=256)
def file_snippets(path: Path) -> tuple[Snippet, ...]:
    """Every function of ``path`` usable as a snippet (any size); empty if it does not parse."""
    try:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ()
    lines = text.splitlines()
    found: list[Snippet] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef):
                snippet = _snippet(path.stem, f"{prefix}{child.name}", child, lines)
                if snippet is not None:
                    found.append(snippet)

    visit(tree, "")
    return tuple(found)


def _snippet(module: str, qualname: str, node: ast.FunctionDef, lines: list[str]) -> Snippet | None:
    if node.decorator_list or node.end_lineno is None:
        return None
    if any(
        isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for inner in ast.walk(node)
        if inner is not node
    ):
        return None
    source = textwrap.dedent("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    if not source.isascii() or "```" in source or "\t" in source:
        return None
    try:
        parsed = ast.parse(source).body[0]
    except SyntaxError:
        return None
    if not isinstance(parsed, ast.FunctionDef):
        return None
    return Snippet(module, qualname, source, parsed)


def pick_snippet(
    rng: random.Random,
    accept: Callable[[Snippet], bool],
    max_lines: int,
    max_chars: int,
) -> Snippet:
    """A snippet chosen by ``rng`` among those ``accept`` takes and within the size limits."""
    files = stdlib_files()
    if not files:
        raise RuntimeError("no standard library sources found (sysconfig stdlib path is empty)")
    for _ in range(MAX_FILE_ATTEMPTS):
        path = files[rng.randrange(len(files))]
        candidates = [
            s
            for s in file_snippets(path)
            if s.source.count("\n") < max_lines and len(s.source) <= max_chars and accept(s)
        ]
        if candidates:
            return candidates[rng.randrange(len(candidates))]
    raise RuntimeError("no standard library snippet matched after many files")
