"""The shell commands README.md shows, and the list that says how each is checked.

Which README text is a command (the rule tests/test_readme_commands.py enforces):

1. Every line of a fenced code block whose info string is ``bash`` (or ``sh``, ``shell``): a
   line ending in ``\\`` is joined with the next; a ``#`` comment (a whole line, or from a ``#``
   after a space outside quotes to the end) is dropped; runs of spaces become one; empty lines
   are skipped. Other fenced blocks (the architecture drawing) hold no commands.
2. Outside fenced blocks, every inline code span (single backticks; it may wrap onto the next
   line) whose first word, after any ``NAME=value`` environment assignments, is one of
   :data:`PROGRAMS` and which has at least one more word. So `make demo` and
   `ANTHROPIC_BASE_URL=... claude -p ...` are commands; `curl` (a word in a sentence),
   `HOSTILE_VLLM=1` (a setting), `/admin/reload` and `POST /admin/reload` (HTTP) are not.

A command shown twice is one command. :data:`COMMANDS_FILE` (``docs/readme_commands.yaml``) has
one entry per command, in README order, each with ``command`` (the text as normalised above)
and ``check``:

- ``run``: executed as written against a demo-style gateway (``tests/fixtures/demo_stack.py``)
  by the check named in ``run`` (a function of the test module), placeholders substituted
  (:data:`PLACEHOLDERS`);
- ``covered_by``: ``tests/FILE.py::test_name`` (or ``tests/FILE.py`` alone, where noted) that
  runs the command; ``reason`` says why it is not run here;
- ``dry``: cannot run in CI here; ``reason`` says why, ``names`` lists what ``make -n TARGET``
  prints (modules, files) for a make target, ``help`` a module whose ``--help`` must exit 0,
  ``compose`` a compose file to validate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import yaml

REPO: Final = Path(__file__).resolve().parents[1]
README: Final = REPO / "README.md"
COMMANDS_FILE: Final = REPO / "docs" / "readme_commands.yaml"
PROGRAMS: Final = frozenset(
    {"make", "switchyard", "python", "python3", "docker", "kill", "curl", "codex", "claude"}
)
SHELL_BLOCKS: Final = frozenset({"bash", "sh", "shell"})
# Placeholders and the demo's addresses in a `run` command, and what the test substitutes
# (values named in braces are the running stack's).
PLACEHOLDERS: Final = {
    "<yaml>": ".cache/demo/switchyard.yaml",
    "<key from make demo>": "{api_key}",
    "<key>": "{api_key}",
    "<key id>": "{key_id}",  # the id `switchyard keys create` printed before
    "<episode id>": "{episode_id}",
    "<candidate state>": "{candidate_state}",
    "<pid>": "{gateway_pid}",
    "http://127.0.0.1:8080": "{gateway_url}",  # the demo gateway's address
    "http://127.0.0.1:8000": "{replica_url}",  # the demo's vLLM replica: the simulator here
    "--port 8901": "--port {free_port}",  # the simulator's default port
}
Check = Literal["run", "covered_by", "dry"]
_FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_SPAN = re.compile(r"`([^`]+)`")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_OPTIONAL = re.compile(r"\[([^\[\]]+)\]")


@dataclass(frozen=True)
class Entry:
    command: str
    check: Check
    run: str | None = None
    covered_by: str | None = None
    reason: str | None = None
    names: tuple[str, ...] = ()
    help: str | None = None
    compose: str | None = None


def _drop_comment(line: str) -> str:
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _normal(text: str) -> str:
    return " ".join(text.split())


def block_commands(body: str) -> list[str]:
    """The commands of one shell block: continuations joined, comments dropped."""
    commands: list[str] = []
    pending = ""
    for raw in body.splitlines():
        line = _drop_comment(raw)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        command = _normal(pending + line)
        pending = ""
        if command:
            commands.append(command)
    if pending.strip():
        commands.append(_normal(pending))
    return commands


def is_command(span: str) -> bool:
    """Whether an inline code span is a command (rule 2 of the module docstring)."""
    words = _normal(span).split(" ")
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    return len(words) >= 2 and words[0] in PROGRAMS


def readme_commands(text: str) -> list[str]:
    """Every command ``text`` (a README) shows, in order of first appearance, each once."""
    found: list[tuple[int, str]] = []
    for fence in _FENCE.finditer(text):
        if fence.group(1) in SHELL_BLOCKS:
            found += [(fence.start(), c) for c in block_commands(fence.group(2))]
    prose = _FENCE.sub(lambda m: " " * len(m.group(0)), text)  # positions kept
    found += [(m.start(), _normal(m.group(1))) for m in _SPAN.finditer(prose) if is_command(m[1])]
    commands: list[str] = []
    for _, command in sorted(found, key=lambda pc: pc[0]):
        if command not in commands:
            commands.append(command)
    return commands


def load_entries(path: Path = COMMANDS_FILE) -> list[Entry]:
    """The list's entries, in its order; an unknown field is an error (``TypeError``)."""
    data = yaml.safe_load(path.read_text())
    return [Entry(**{**item, "names": tuple(item.get("names", ()))}) for item in data["commands"]]


def substitute(command: str, values: dict[str, object]) -> str:
    """``command`` as the test runs it: placeholders and the demo's addresses replaced, every
    ``[optional argument]`` given."""
    for placeholder, value in PLACEHOLDERS.items():
        if placeholder in command:
            command = command.replace(placeholder, value.format(**values))
    return _OPTIONAL.sub(r"\1", command)
