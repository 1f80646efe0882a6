"""Which of a client's tools does what, and the calls a competent model makes with them.

Clients name their tools differently (Claude Code ``Bash``/``Read``/``Edit``/``Write``, Codex
``exec_command``/``apply_patch``, Continue ``run_terminal_command``/``read_file``/
``edit_existing_file``, an llm user's own functions). :func:`roles` reads each offered tool's name
and JSON-schema properties and gives it a role:

- ``delegate``: starts another agent or a background task (any tool whose name says "agent",
  or ``Task``); never a generic choice (:func:`ordinary`), used only when the user asks for it;
- ``shell``: runs a command (a ``command``/``cmd`` property on a tool named for running);
- ``read`` / ``write`` / ``edit``: a path property, plus content, or old and new text;
- ``patch``: ``apply_patch`` (Codex's patch format, ``*** Begin Patch`` ...).

:func:`plan_calls` turns an instruction's steps (:mod:`.instructions`) into calls on those
tools, preferring the tool made for the step and falling back to the shell, as models do: read
with ``read`` else ``cat``; edit with ``edit``, else ``patch``, else ``write`` with the file's new
content (from what the conversation read of it), else a one-line Python replace in the shell;
write with ``write`` else the shell; run with the shell. Paths are absolute where the working
directory is known (the client states it in its prompt).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final, Literal

from loadtests.frontier_sim.instructions import Step
from loadtests.frontier_sim.transcript import PlannedCall, ToolStep

Role = Literal["delegate", "shell", "read", "write", "edit", "patch", "other"]

_PATH_KEYS: Final = ("file_path", "filepath", "path", "filename", "file", "target_file")
_OLD_KEYS: Final = ("old_string", "old_str", "old_text", "old", "search", "find")
_NEW_KEYS: Final = ("new_string", "new_str", "new_text", "new", "replacement", "replace")
_CONTENT_KEYS: Final = ("content", "contents", "file_text", "text")
_COMMAND_KEYS: Final = ("command", "cmd")
_DELEGATE: Final = re.compile(r"agent|^task$|^dispatch|^spawn|^delegate", re.IGNORECASE)
_SHELL_NAME: Final = re.compile(r"bash|shell|exec|command|terminal|^run", re.IGNORECASE)
_READ_NAME: Final = re.compile(r"^(?:read|view|open|cat)(?:_?file)?$|^read", re.IGNORECASE)
_WRITE_NAME: Final = re.compile(r"write|create", re.IGNORECASE)
_SUBAGENT: Final = re.compile(
    r"\byou are an? (?:\w+ )?sub-?agent\b|\byou are an agent for .{0,80}?given the user'?s message",
    re.IGNORECASE | re.DOTALL,
)
_NOT_GENERIC: Final = re.compile(r"^(?:exit|quit)$|ask|user_input", re.IGNORECASE)
_LINE_NUMBER: Final = re.compile(r"^\s*\d+(?:\t|→|: ?)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A function the client offers: its name and JSON-schema parameters."""

    name: str
    parameters: Mapping[str, Any]


def arguments_from_schema(schema: Any) -> dict[str, Any]:
    """Arguments for an object schema: a plausible value for each required property (a schema
    of another shape, as hostile clients send, gets none)."""
    if not isinstance(schema, Mapping):
        return {}
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, Mapping) or not isinstance(required, list):
        properties = properties if isinstance(properties, Mapping) else {}
        required = required if isinstance(required, list) else []
    return {
        name: _value_for(name, properties.get(name) or {})
        for name in required
        if isinstance(name, str)
    }


def _value_for(name: str, schema: Any) -> Any:
    if not isinstance(schema, Mapping):
        return f"sim-{name}"
    if "default" in schema:
        return schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind == "object":
        return arguments_from_schema(schema)
    simple: dict[str, Any] = {"integer": 1, "number": 1.5, "boolean": True, "array": []}
    return simple.get(kind, f"sim-{name}")


def _props(tool: ToolSpec) -> Mapping[str, Any]:
    params = tool.parameters
    props = params.get("properties") if isinstance(params, Mapping) else None
    return props if isinstance(props, Mapping) else {}


def _key(props: Mapping[str, Any], names: Sequence[str]) -> str | None:
    return next((n for n in names if n in props), None)


def role_of(tool: ToolSpec) -> Role:
    """What ``tool`` does, from its name (its last part, for a namespaced ``repo.read_file`` or
    ``repo__read_file``) and properties (see the module docstring)."""
    name, props = re.split(r"[.:/]|__", tool.name)[-1], _props(tool)
    if _DELEGATE.search(name):
        return "delegate"
    if name.lower() == "apply_patch":
        return "patch"
    if _key(props, _COMMAND_KEYS) and _SHELL_NAME.search(name):
        return "shell"
    path = _key(props, _PATH_KEYS)
    if path and _key(props, _OLD_KEYS) and _key(props, _NEW_KEYS):
        return "edit"
    if path and _key(props, _CONTENT_KEYS) and _WRITE_NAME.search(name):
        return "write"
    if path and _READ_NAME.search(name):
        return "read"
    return "other"


def roles(tools: Sequence[ToolSpec]) -> dict[Role, ToolSpec]:
    """The first offered tool of each role."""
    found: dict[Role, ToolSpec] = {}
    for tool in tools:
        found.setdefault(role_of(tool), tool)
    return found


def role_of_name(tools: Sequence[ToolSpec], name: str) -> Role | None:
    """The role of the offered tool called ``name`` (None when none is)."""
    return next((role_of(t) for t in tools if t.name == name), None)


def is_subagent(system_texts: Sequence[str]) -> bool:
    """Whether the system prompt is a sub-agent's: one that was handed a task by another agent
    (Claude Code's "You are an agent for Claude Code ... Given the user's message", or any
    prompt calling the model a sub-agent). A sub-agent never delegates further."""
    return any(_SUBAGENT.search(text) for text in system_texts)


def ordinary(tools: Sequence[ToolSpec]) -> list[ToolSpec]:
    """The tools a model may pick for a generic "use a tool" request: never one that delegates,
    ends the client (Continue's ``Exit``) or waits for a person (``AskQuestion``,
    ``request_user_input``)."""
    return [t for t in tools if role_of(t) != "delegate" and not _NOT_GENERIC.search(t.name)]


def working_directory(texts: Sequence[str]) -> str | None:
    """The working directory a client states in its prompt (Claude Code's "Primary working
    directory: /x", Codex's ``<cwd>/x</cwd>``, "Working directory: /x"), if any."""
    pattern = re.compile(
        r"(?:working directory|cwd|current directory)\s*[:=]\s*(/\S+)|<cwd>\s*(/[^<\s]+)\s*</cwd>",
        re.IGNORECASE,
    )
    for text in texts:
        if "/" not in text:
            continue
        found = pattern.search(text)
        if found:
            return (found.group(1) or found.group(2)).rstrip(".,;")
    return None


def _path_for(path: str, cwd: str | None) -> str:
    """``path`` made absolute in the working directory the client stated, as models write paths
    for tools (Claude Code's ``file_path`` must be absolute); as the user wrote it otherwise."""
    if cwd and not path.startswith("/"):
        return str(PurePosixPath(cwd) / path)
    return path


def _filled(tool: ToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` plus a plausible value for each other required property."""
    extra = arguments_from_schema(tool.parameters)
    return {**{k: v for k, v in extra.items() if k not in arguments}, **arguments}


def shell_call(tool: ToolSpec, command: str) -> PlannedCall:
    """``command`` run by the shell tool ``tool`` (an argv array where the schema wants one)."""
    props = _props(tool)
    key = _key(props, _COMMAND_KEYS) or "command"
    spec = props.get(key)
    value: Any = command
    if isinstance(spec, Mapping) and spec.get("type") == "array":
        value = ["bash", "-lc", command]
    return PlannedCall(tool.name, _filled(tool, {key: value}))


def file_text(path: str, results: Sequence[ToolStep]) -> str | None:
    """The content of ``path`` as the conversation last read it (line numbers removed)."""
    name = PurePosixPath(path).name
    for step in reversed(results):
        if step.result is None or name not in step.arguments:
            continue
        text = step.result
        if _LINE_NUMBER.match(text):
            text = _LINE_NUMBER.sub("", text)
        return text
    return None


def _patch(action: str, path: str, body: str) -> str:
    return f"*** Begin Patch\n*** {action} File: {path}\n{body}*** End Patch\n"


def _patch_call(tool: ToolSpec, patch: str) -> PlannedCall:
    key = _key(_props(tool), ("input", "patch")) or "input"
    return PlannedCall(tool.name, _filled(tool, {key: patch}))


def _python_replace(path: str, old: str, new: str) -> str:
    program = (
        f"import pathlib; p = pathlib.Path({json.dumps(path)}); "
        f"p.write_text(p.read_text().replace({json.dumps(old)}, {json.dumps(new)}))"
    )
    return f"python3 -c {shlex.quote(program)}"


def step_call(
    step: Step, found: Mapping[Role, ToolSpec], cwd: str | None, seen: Sequence[ToolStep]
) -> PlannedCall | None:
    """The call that performs ``step`` with the tools ``found``; None when none can."""
    shell = found.get("shell")
    if step.kind == "run":
        return shell_call(shell, step.command) if shell else None
    if step.kind == "read":
        if "read" in found:
            tool = found["read"]
            key = _key(_props(tool), _PATH_KEYS) or "path"
            path = _path_for(step.path, cwd)
            return PlannedCall(tool.name, _filled(tool, {key: path}))
        return shell_call(shell, f"cat {shlex.quote(step.path)}") if shell else None
    if step.kind == "write":
        return _write_call(found, step.path, step.content, cwd)
    return _edit_call(step, found, cwd, seen)


def _write_call(
    found: Mapping[Role, ToolSpec], path: str, content: str, cwd: str | None
) -> PlannedCall | None:
    if "write" in found:
        tool = found["write"]
        props = _props(tool)
        key = _key(props, _PATH_KEYS) or "path"
        body = _key(props, _CONTENT_KEYS) or "content"
        args = {key: _path_for(path, cwd), body: content}
        return PlannedCall(tool.name, _filled(tool, args))
    if "patch" in found:
        lines = "".join(f"+{line}\n" for line in content.splitlines() or [""])
        return _patch_call(found["patch"], _patch("Add", path, lines))
    if "shell" in found:
        command = f"printf '%s\\n' {shlex.quote(content)} > {shlex.quote(path)}"
        return shell_call(found["shell"], command)
    return None


def _edit_call(
    step: Step, found: Mapping[Role, ToolSpec], cwd: str | None, seen: Sequence[ToolStep]
) -> PlannedCall | None:
    if "edit" in found:
        tool = found["edit"]
        props = _props(tool)
        path_key = _key(props, _PATH_KEYS) or "path"
        args = {
            path_key: _path_for(step.path, cwd),
            _key(props, _OLD_KEYS) or "old": step.old,
            _key(props, _NEW_KEYS) or "new": step.new,
        }
        return PlannedCall(tool.name, _filled(tool, args))
    before = file_text(step.path, seen)
    if "patch" in found and before is not None and step.old in before:
        line = next(ln for ln in before.splitlines() if step.old in ln)
        body = f"@@\n-{line}\n+{line.replace(step.old, step.new)}\n"
        return _patch_call(found["patch"], _patch("Update", step.path, body))
    if "write" in found and before is not None:
        return _write_call(found, step.path, before.replace(step.old, step.new), cwd)
    if "shell" in found:
        return shell_call(found["shell"], _python_replace(step.path, step.old, step.new))
    return None
