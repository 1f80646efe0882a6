"""The sandbox an agent's tool calls run in: one workspace per episode, every call bounded.

A :class:`Workspace` is a temporary folder holding ``repo/`` (the task's repository, the only
place tool calls may read or write) and ``scratch/`` (the sandbox's own files: the boot script,
the test harness, output files, patches). :meth:`Workspace.execute` takes a tool call as the
model made it (a name and the arguments' JSON text) and always returns a :class:`ToolOutcome`,
never raises for what the model sent:

- ``invalid``: an unknown tool, arguments that are not a JSON object, or arguments that break the
  tool's JSON schema (:mod:`tasks.agent.tools`); nothing runs;
- ``error``: a well-formed call that failed (no such file, a snippet not found, a patch that does
  not apply, a path outside the repository, tests that ran out of time);
- ``ok``: done; ``changed`` says whether the repository changed (an edit that replaces a string
  by itself, or a patch that changes nothing, is ``ok`` and unchanged).

Limits (:class:`SandboxConfig`): every result is cut to ``output_chars`` (the head of a file or a
listing, the tail of a test report, where pytest puts its summary), reads to ``read_lines``,
listings and searches to ``list_entries`` / ``search_matches``; no edit or patch may leave a file
larger than ``file_bytes``. Paths are resolved (symbolic links included) and must stay inside
``repo/``; a patch that would add a symbolic link or binary data is refused, and ``git apply``
refuses ``..`` paths itself. A search runs on the ``regex`` engine under a time limit
(``search_s``): a pattern that backtracks catastrophically is stopped, not left to spin.
``run_tests`` runs pytest in a child process through the same boot as the IDE tasks' verifiers
(:func:`tasks.ide.verify.run_sandboxed`: ``RLIMIT_AS``, ``RLIMIT_CPU``, ``RLIMIT_FSIZE``,
an audit hook refusing writes outside ``repo/``, sockets and subprocesses, a wall-clock kill)
and, where ``unshare --net`` works (root on Linux), in a network
namespace of its own with no interface up. A test that loops is stopped by the wall clock or the
CPU limit, one that floods its output by the file-size limit (the output files are bounded), one
that writes outside the repository by the audit hook; each is reported to the model as such.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import jsonschema
import regex as regexp
from pydantic import BaseModel, ConfigDict, Field

from tasks.agent.tools import tool_schemas
from tasks.ide.verify import SandboxLimits, run_sandboxed

OutcomeStatus = Literal["ok", "error", "invalid"]
MUTATING_TOOLS = frozenset({"edit", "apply_patch"})
_RESULT_MARK = "@@sandbox-result@@ "
_SKIPPED_DIRS = frozenset({"__pycache__", ".pytest_cache"})
_SYMLINK_OR_BINARY = re.compile(r"^(?:(?:new file|new|old) mode 120000|GIT binary patch)", re.M)
_SIGNAL_LIMITS = {
    24: "the CPU time limit",
    25: "the output size limit",
    9: "the CPU or memory limit",
}
_FILE_TOO_LARGE = "File too large"

_HARNESS = """
import json, os, sys
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
import pytest


class _Tally:
    counts = {{}}

    def pytest_terminal_summary(self, terminalreporter):
        for key in ("passed", "failed", "error", "skipped"):
            self.counts[key] = len(terminalreporter.stats.get(key, ()))


_tally = _Tally()
_code = pytest.main({args!r}, plugins=[_tally])
sys.stdout.write("\\n" + {mark!r} + json.dumps(dict(exit=int(_code), **_tally.counts)) + "\\n")
"""


class SandboxConfig(BaseModel):
    """Limits of the agent sandbox; each is defined here once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output_chars: int = Field(default=6000, ge=200, description="Longest tool result returned.")
    read_lines: int = Field(default=400, ge=1, description="Most lines one read_file returns.")
    list_entries: int = Field(default=200, ge=1, description="Most entries list_dir returns.")
    search_matches: int = Field(default=50, ge=1, description="Most lines search returns.")
    file_bytes: int = Field(
        default=64 * 1024, ge=1024, description="Largest file an edit or patch may leave."
    )
    test_wall_s: float = Field(default=30.0, gt=0, description="run_tests wall-clock limit.")
    test_cpu_s: int = Field(default=20, ge=1, description="run_tests CPU-seconds limit.")
    test_memory_mb: int = Field(default=512, ge=128, description="run_tests address space.")
    test_output_kb: int = Field(
        default=1024, ge=64, description="Largest file (output included) a test run may write."
    )
    patch_timeout_s: float = Field(default=10.0, gt=0, description="apply_patch time limit.")
    search_s: float = Field(default=2.0, gt=0, description="search time limit (all files).")
    isolate_network: bool = Field(
        default=True, description="Run tests in an empty network namespace where possible."
    )

    def test_limits(self) -> SandboxLimits:
        return SandboxLimits(
            wall_s=self.test_wall_s,
            cpu_s=self.test_cpu_s,
            memory_mb=self.test_memory_mb,
            file_kb=self.test_output_kb,
            open_files=64,
        )


@dataclass(frozen=True, slots=True)
class TestReport:
    """What one pytest run in the sandbox did."""

    exit_code: int | None  # pytest's; None when the run did not finish
    passed: int = 0
    failed: int = 0
    errors: int = 0
    output: str = ""
    stopped_by: str | None = None  # the limit that stopped it, if one did

    @property
    def all_passed(self) -> bool:
        return self.exit_code == 0 and self.failed == 0 and self.errors == 0 and self.passed > 0


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """The result of one tool call: the text sent back to the model and what happened."""

    text: str
    status: OutcomeStatus
    changed: bool = False
    stopped_by: str | None = None
    tests: TestReport | None = None


class ToolError(Exception):
    """A well-formed call that failed; its message goes back to the model."""


@dataclass(slots=True)
class SandboxRunner:
    """What every workspace of a run shares: the limits and how tests are launched.

    ``launcher`` is ``unshare --net`` when ``config.isolate_network`` and it works here (probed
    once, by :meth:`create`); ``import_paths`` make pytest importable in the isolated child."""

    config: SandboxConfig = field(default_factory=SandboxConfig)
    launcher: tuple[str, ...] = ()
    import_paths: tuple[str, ...] = ()

    @classmethod
    def create(cls, config: SandboxConfig | None = None) -> SandboxRunner:
        config = config or SandboxConfig()
        paths = sysconfig.get_paths()
        import_paths = tuple(dict.fromkeys((paths["purelib"], paths["platlib"])))
        launcher: tuple[str, ...] = ()
        unshare = shutil.which("unshare")
        if config.isolate_network and unshare is not None:
            probe = subprocess.run([unshare, "--net", "true"], capture_output=True, check=False)
            if probe.returncode == 0:
                launcher = (unshare, "--net")
        return cls(config, launcher, import_paths)

    def run_pytest(
        self, repo: Path, scratch: Path, targets: Sequence[str] = (), keyword: str | None = None
    ) -> TestReport:
        """pytest on ``targets`` (all tests when empty) in ``repo``, confined to it."""
        ini = scratch / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        args = [
            "-q", "-p", "no:cacheprovider", "-p", "no:logging", "-p", "no:faulthandler",
            "--tb=short", "--no-header", "-c", str(ini), "--rootdir", ".", *targets,
        ]  # fmt: skip
        if keyword:
            args += ["-k", keyword]
        harness = scratch / "_run_tests.py"
        harness.write_text(_HARNESS.format(args=args, mark=_RESULT_MARK), encoding="utf-8")
        result = run_sandboxed(
            repo,
            str(harness),
            self.config.test_limits(),
            scratch=scratch,
            import_paths=self.import_paths,
            launcher=self.launcher,
        )
        output, _, tail = result.stdout.rpartition(_RESULT_MARK)
        if not result.completed or not tail:
            if result.timed_out:
                stopped = f"the {self.config.test_wall_s:g} s time limit"
            elif _FILE_TOO_LARGE in result.stderr or _FILE_TOO_LARGE in result.stdout:
                stopped = _SIGNAL_LIMITS[25]  # Python ignores SIGXFSZ: the write fails instead
            else:
                stopped = _SIGNAL_LIMITS.get(-result.returncode, "")
            why = f"stopped by {stopped}" if stopped else "ended early"
            detail = result.failure_text()
            text = f"{result.stdout}\n{why}: {detail}".strip()
            return TestReport(None, output=text, stopped_by=stopped or "early exit")
        counts = json.loads(tail)
        return TestReport(
            counts["exit"],
            passed=counts.get("passed", 0),
            failed=counts.get("failed", 0),
            errors=counts.get("error", 0),
            output=output.strip(),
        )


class Workspace:
    """One episode's repository in the sandbox (see the module docstring)."""

    def __init__(
        self, files: Mapping[str, str], runner: SandboxRunner, tools: Sequence[str]
    ) -> None:
        self.runner = runner
        self.config = runner.config
        self._tmp = tempfile.TemporaryDirectory(prefix="sy-agent-")
        self.root = Path(self._tmp.name)
        self.repo = self.root / "repo"
        self.scratch = self.root / "scratch"
        self.scratch.mkdir()
        self.repo.mkdir()
        for path, text in files.items():
            target = self.repo / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        self.schemas = tool_schemas(tuple(tools))
        self._validators = {
            name: jsonschema.Draft202012Validator(schema) for name, schema in self.schemas.items()
        }

    # ---------------------------------------------------------------- the calls

    def execute(self, name: str, arguments: str) -> ToolOutcome:
        """Run one tool call (``arguments`` is the JSON text the model produced)."""
        validator = self._validators.get(name)
        if validator is None:
            known = ", ".join(self.schemas)
            return ToolOutcome(f"Error: unknown tool {name!r}; the tools are: {known}", "invalid")
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            return ToolOutcome(f"Error: the arguments are not valid JSON ({exc.msg})", "invalid")
        if not isinstance(args, dict):
            return ToolOutcome("Error: the arguments must be a JSON object", "invalid")
        error = next(iter(validator.iter_errors(args)), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            return ToolOutcome(f"Error: invalid arguments for {name}: {where}: {error.message}",
                               "invalid")  # fmt: skip
        try:
            return getattr(self, f"_{name}")(**args)  # type: ignore[no-any-return]
        except ToolError as exc:
            return ToolOutcome(f"Error: {exc}", "error")

    def _read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> ToolOutcome:
        target = self._file(path)
        lines = self._text(target).splitlines()
        first = start_line or 1
        last = min(end_line or len(lines), len(lines), first + self.config.read_lines - 1)
        numbered = "\n".join(f"{n:>6}\t{lines[n - 1]}" for n in range(first, last + 1))
        if last < len(lines) and end_line is None:
            numbered += f"\n... ({len(lines) - last} more lines; read with start_line)"
        return ToolOutcome(self._head(numbered or "(empty file)"), "ok")

    def _list_dir(self, path: str, depth: int = 1) -> ToolOutcome:
        base = self._resolve(path)
        if not base.is_dir():
            raise ToolError(f"{path} is not a directory")
        entries: list[str] = []
        self._walk(base, depth, 0, entries)
        if len(entries) > self.config.list_entries:
            cut = len(entries) - self.config.list_entries
            entries = [*entries[: self.config.list_entries], f"... ({cut} more)"]
        return ToolOutcome(self._head("\n".join(entries) or "(empty directory)"), "ok")

    def _walk(self, folder: Path, depth: int, level: int, out: list[str]) -> None:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name in _SKIPPED_DIRS or len(out) > self.config.list_entries:
                continue
            is_dir = entry.is_dir() and not entry.is_symlink()
            out.append("  " * level + entry.name + ("/" if is_dir else ""))
            if is_dir and level + 1 < depth:
                self._walk(entry, depth, level + 1, out)

    def _search(self, query: str, path: str = ".", regex: bool = False) -> ToolOutcome:
        base = self._resolve(path)
        try:
            pattern = regexp.compile(query if regex else regexp.escape(query))
        except regexp.error as exc:
            raise ToolError(f"invalid regular expression: {exc}") from exc
        deadline = time.monotonic() + self.config.search_s
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        matches: list[str] = []
        for file in files:
            if _SKIPPED_DIRS.intersection(file.relative_to(self.repo).parts) or file.is_symlink():
                continue
            try:
                text = file.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            rel = file.relative_to(self.repo).as_posix()
            for number, line in enumerate(text.splitlines(), 1):
                try:
                    found = pattern.search(line, timeout=max(deadline - time.monotonic(), 0.0))
                except TimeoutError:
                    limit = f"the {self.config.search_s:g} s search time limit"
                    text = f"Error: the search was stopped by {limit} (a pattern that backtracks?)"
                    return ToolOutcome(text, "error", stopped_by=limit)
                if found:
                    matches.append(f"{rel}:{number}: {line.strip()}")
        if not matches:
            return ToolOutcome(f"No matches for {query!r}", "ok")
        shown = matches[: self.config.search_matches]
        if len(matches) > len(shown):
            shown.append(f"... ({len(matches) - len(shown)} more matches)")
        return ToolOutcome(self._head("\n".join(shown)), "ok")

    def _edit(
        self, path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> ToolOutcome:
        target = self._resolve(path)
        if not target.exists() and old_string == "":
            self._write(target, new_string)
            return ToolOutcome(f"Created {path}", "ok", changed=True)
        text = self._text(self._file(path))
        count = text.count(old_string) if old_string else 0
        if count == 0:
            raise ToolError(f"old_string was not found in {path}")
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_string occurs {count} times in {path}; give more context or replace_all"
            )
        updated = (
            text.replace(old_string, new_string)
            if replace_all
            else text.replace(old_string, new_string, 1)
        )
        if updated == text:
            return ToolOutcome(f"No change: the new text equals the old in {path}", "ok")
        self._write(target, updated)
        times = f"{count} replacements" if replace_all else "1 replacement"
        return ToolOutcome(f"Edited {path} ({times})", "ok", changed=True)

    def _apply_patch(self, patch: str) -> ToolOutcome:
        if _SYMLINK_OR_BINARY.search(patch):
            raise ToolError("patches may not add symbolic links or binary data")
        if len(patch.encode()) > 2 * self.config.file_bytes:
            raise ToolError("the patch is too large")
        before = self.fingerprint()
        patch_file = self.scratch / "change.patch"
        patch_file.write_text(patch if patch.endswith("\n") else patch + "\n", encoding="utf-8")
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.scratch),
            "GIT_CEILING_DIRECTORIES": str(self.root),
            "LANG": "C.UTF-8",
        }
        try:
            proc = subprocess.run(
                ["git", "apply", "--recount", "--whitespace=nowarn", str(patch_file)],
                cwd=self.repo,
                capture_output=True,
                text=True,
                timeout=self.config.patch_timeout_s,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ToolError("applying the patch took too long") from exc
        if proc.returncode != 0:
            raise ToolError("the patch does not apply:\n" + self._head(proc.stderr.strip()))
        self._remove_links()
        oversized = [p for p in self._files() if p.stat().st_size > self.config.file_bytes]
        if oversized:
            raise ToolError(f"the patch leaves files over {self.config.file_bytes} bytes")
        changed = self.fingerprint() != before
        return ToolOutcome("Applied the patch" if changed else "The patch changed nothing", "ok",
                           changed=changed)  # fmt: skip

    def _run_tests(self, paths: Sequence[str] = (), keyword: str | None = None) -> ToolOutcome:
        for path in paths:
            if not self._resolve(path.split("::", 1)[0]).exists():
                raise ToolError(f"no such test file: {path}")
        report = self.runner.run_pytest(self.repo, self.scratch, paths, keyword)
        text = self._tail(report.output or "(no output)")
        status: OutcomeStatus = "error" if report.stopped_by else "ok"
        return ToolOutcome(text, status, stopped_by=report.stopped_by, tests=report)

    # ---------------------------------------------------------------- helpers

    def _resolve(self, path: str) -> Path:
        """``path`` inside the repository (symbolic links followed); ToolError otherwise."""
        if "\x00" in path:
            raise ToolError("invalid path")
        resolved = (self.repo / path).resolve()
        if resolved != self.repo and self.repo not in resolved.parents:
            raise ToolError(f"{path} is outside the workspace")
        return resolved

    def _file(self, path: str) -> Path:
        target = self._resolve(path)
        if not target.is_file():
            raise ToolError(f"no such file: {path}")
        return target

    def _text(self, target: Path) -> str:
        if target.stat().st_size > self.config.file_bytes:
            raise ToolError(f"{target.name} is larger than {self.config.file_bytes} bytes")
        try:
            return target.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"{target.name} is not a UTF-8 text file") from exc

    def _write(self, target: Path, text: str) -> None:
        if len(text.encode()) > self.config.file_bytes:
            raise ToolError(f"the file would be larger than {self.config.file_bytes} bytes")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")

    def _head(self, text: str) -> str:
        limit = self.config.output_chars
        if len(text) <= limit:
            return text
        return f"{text[:limit]}\n... ({len(text) - limit} characters cut)"

    def _tail(self, text: str) -> str:
        limit = self.config.output_chars
        if len(text) <= limit:
            return text
        return f"({len(text) - limit} characters cut) ...\n{text[-limit:]}"

    def _files(self) -> list[Path]:
        return sorted(
            p
            for p in self.repo.rglob("*")
            if p.is_file() and not _SKIPPED_DIRS.intersection(p.relative_to(self.repo).parts)
        )

    def _remove_links(self) -> None:
        for entry in self.repo.rglob("*"):
            if entry.is_symlink():
                entry.unlink()

    def fingerprint(self) -> str:
        """A digest of every file's path and content (tells whether anything changed)."""
        digest = hashlib.blake2b(digest_size=16)
        for p in self._files():
            digest.update(p.relative_to(self.repo).as_posix().encode() + b"\0")
            digest.update(p.read_bytes() + b"\0")
        return digest.hexdigest()

    def snapshot(self) -> dict[str, str]:
        """The repository's text files now, by relative path."""
        out: dict[str, str] = {}
        for p in self._files():
            try:
                out[p.relative_to(self.repo).as_posix()] = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
        return out

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def arguments_of(raw: Any) -> str:
    """Tool-call arguments as JSON text, whatever shape a wire gave them in."""
    return raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
