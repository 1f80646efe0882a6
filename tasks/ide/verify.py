"""Run untrusted answer code in a subprocess with time, memory, file and capability limits.

How one run works (:func:`run_python`):
1. a fresh temporary directory gets ``main.py`` (the program), any extra files, and a boot script;
2. ``python -I -S boot.py`` starts there (isolated: no user site, no PYTHON* variables, no
   site-packages, minimal environment) with stdout and stderr redirected to files in that
   directory, so output is bounded by the file-size limit;
3. the boot script lowers its own limits first (``RLIMIT_AS`` memory, ``RLIMIT_CPU`` seconds,
   ``RLIMIT_FSIZE`` bytes per file, ``RLIMIT_NOFILE``, no core dumps), reads a one-time nonce from
   stdin, then installs an audit hook that refuses: writes, renames and removals outside the
   temporary directory; sockets (no network); subprocesses, ``fork``, ``exec``, ``system``,
   signals to other processes; ``ctypes``;
4. it runs ``main.py`` as ``__main__`` and prints the nonce as its last line only if the program
   returned normally; :attr:`RunResult.completed` checks that, so an answer that calls
   ``sys.exit(0)`` or ``os._exit(0)`` early does not count as success;
5. the parent kills the child after ``wall_s`` seconds (sleeping code burns no CPU).

:func:`static_guard` is the second line: answers may not import beyond an allowlist or use
``open``, ``exec``, ``eval``, ``getattr``, dunder attributes and the like, which closes the easy
ways to inspect the test harness (e.g. a test that compares the function's source text).
Neither layer is a security boundary against a determined adversary; they stop accidental damage
and the reward hacks a policy trained on these verifiers is likely to find.
"""

from __future__ import annotations

import ast
import re
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

OUTPUT_LIMIT_CHARS = 4000
ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {
        "bisect",
        "collections",
        "dataclasses",
        "decimal",
        "fractions",
        "functools",
        "heapq",
        "itertools",
        "math",
        "operator",
        "re",
        "statistics",
        "string",
        "typing",
    }
)
FORBIDDEN_NAMES: frozenset[str] = frozenset(
    {
        "__builtins__",
        "__import__",
        "breakpoint",
        "compile",
        "delattr",
        "eval",
        "exec",
        "exit",
        "getattr",
        "globals",
        "help",
        "input",
        "locals",
        "memoryview",
        "open",
        "quit",
        "setattr",
        "vars",
    }
)
_ALLOWED_DUNDER_NAMES = frozenset({"__name__"})


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits of one sandboxed run."""

    wall_s: float = 5.0
    cpu_s: int = 2
    memory_mb: int = 256
    file_kb: int = 256
    open_files: int = 32


DEFAULT_LIMITS = SandboxLimits()


@dataclass(frozen=True, slots=True)
class RunResult:
    """What a sandboxed run did: exit status, bounded output, and whether it finished normally."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    completed: bool

    def failure_text(self) -> str:
        """A short description of why the run did not complete (the verifier's feedback)."""
        if self.timed_out:
            return "the code did not finish in time (an infinite loop or a blocking call?)"
        if self.returncode < 0:
            return f"the process was killed by signal {-self.returncode} (CPU or memory limit)"
        tail = summarize_traceback(self.stderr)
        if tail:
            return tail
        if self.returncode == 0:
            return "the code exited before the tests finished"
        return f"exit status {self.returncode}"


_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+)')


def summarize_traceback(stderr: str) -> str:
    """The last frame in the user's files and the exception line, without sandbox frames."""
    lines = [line for line in stderr.rstrip().splitlines() if line.strip()]
    if not lines:
        return ""
    frames: list[tuple[str, str]] = []
    for i, line in enumerate(lines):
        match = _FRAME.match(line)
        # Frames of the sandbox's own files have relative paths; stdlib frames are absolute.
        if match and match.group(1)[:1] not in ("<", "/") and "_sandbox_boot" not in line:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            frames.append((match.group(1), f"{match.group(1)}, line {match.group(2)}: {code}"))
    # Prefer the deepest frame outside main.py (the verifiers' harness) when there is one.
    frame = next((text for name, text in reversed(frames) if name != "main.py"), "")
    if not frame and frames:
        frame = frames[-1][1]
    if frame.startswith("main.py") and len(frames) == 1 and "raise AssertionError" in frame:
        frame = ""
    exception = lines[-1].strip()
    return f"{frame}\n{exception}" if frame else exception


_BOOT = r"""
import os, resource, sys

def _limit(which, value):
    resource.setrlimit(which, (value, value))

_limit(resource.RLIMIT_AS, {memory} * 1024 * 1024)
_limit(resource.RLIMIT_CPU, {cpu})
_limit(resource.RLIMIT_FSIZE, {fsize})
_limit(resource.RLIMIT_NOFILE, {nofile})
_limit(resource.RLIMIT_CORE, 0)
_NONCE = sys.stdin.readline().strip()
_ROOT = os.path.realpath(os.getcwd())
_PATH_EVENTS = frozenset((
    "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
    "os.link", "os.symlink", "os.utime", "shutil.rmtree", "shutil.move", "shutil.copyfile",
    "shutil.copytree", "shutil.chown",
))
_BLOCKED_EVENTS = frozenset((
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork",
    "os.forkpty", "os.kill", "os.killpg", "pty.spawn", "webbrowser.open", "os.startfile",
))
_BLOCKED_PREFIXES = ("socket.", "ctypes.", "urllib.", "ftplib.", "smtplib.", "http.", "_posixsub")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC

def _inside(path):
    if isinstance(path, int):
        return True
    real = os.path.realpath(os.fsdecode(path))
    return real == _ROOT or real.startswith(_ROOT + os.sep)

def _hook(event, args):
    if event == "open":
        path, mode, flags = args
        writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & _WRITE_FLAGS)
        if writing and path is not None and not _inside(path):
            raise PermissionError("sandbox: writing outside the working directory is refused")
    elif event in _PATH_EVENTS:
        for arg in args:
            if isinstance(arg, (str, bytes, os.PathLike)) and not _inside(arg):
                raise PermissionError("sandbox: " + event + " outside the working directory")
    elif event in _BLOCKED_EVENTS or event.startswith(_BLOCKED_PREFIXES):
        raise PermissionError("sandbox: " + event + " is not allowed")

sys.path.insert(0, _ROOT)
sys.path.extend({import_paths!r})
sys.dont_write_bytecode = True
sys.addaudithook(_hook)
import runpy
runpy.run_path({program!r}, run_name="__main__")
sys.stdout.flush()
sys.stdout.write("\n" + _NONCE + "\n")
sys.stdout.flush()
"""


def _read_bounded(path: Path) -> str:
    with path.open("rb") as f:
        data = f.read(OUTPUT_LIMIT_CHARS * 4)
    return data.decode("utf-8", errors="replace")[-OUTPUT_LIMIT_CHARS:]


def run_python(
    program: str,
    files: Mapping[str, str] | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> RunResult:
    """Run ``program`` as ``main.py`` in a fresh sandbox with ``files`` beside it (name -> text)."""
    with tempfile.TemporaryDirectory(prefix="sy-sandbox-") as tmp:
        root = Path(tmp)
        for name, text in {**(files or {}), "main.py": program}.items():
            if "/" in name or name.startswith("."):
                raise ValueError(f"sandbox file names must be plain names: {name!r}")
            (root / name).write_text(text, encoding="utf-8")
        return run_sandboxed(root, "main.py", limits, scratch=root)


def run_sandboxed(
    root: Path,
    program: str,
    limits: SandboxLimits = DEFAULT_LIMITS,
    *,
    scratch: Path,
    import_paths: Sequence[str] = (),
    launcher: Sequence[str] = (),
) -> RunResult:
    """Run the Python file ``program`` (a path, relative to ``root`` or absolute) confined to
    ``root`` (steps 2-5 of the module docstring); :func:`run_python` is this on a fresh folder.

    ``scratch`` holds the boot script and the output files (``root`` itself, or a folder outside
    it so a workspace is left as it was); ``import_paths`` are appended to ``sys.path`` (the
    harness's libraries); ``launcher`` prefixes the command (e.g. ``unshare --net``).
    """
    nonce = secrets.token_hex(16)
    boot = _BOOT.format(
        memory=limits.memory_mb,
        cpu=limits.cpu_s,
        fsize=limits.file_kb * 1024,
        nofile=limits.open_files,
        import_paths=list(import_paths),
        program=program,
    )
    boot_path = scratch / "_sandbox_boot.py"
    boot_path.write_text(boot, encoding="utf-8")
    out_path, err_path = scratch / "_stdout.txt", scratch / "_stderr.txt"
    timed_out = False
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(
            [*launcher, sys.executable, "-I", "-S", str(boot_path)],
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=err,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            start_new_session=True,
        )
        try:
            proc.communicate((nonce + "\n").encode(), timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            proc.wait()
    stdout, stderr = _read_bounded(out_path), _read_bounded(err_path)
    lines = stdout.rstrip("\n").splitlines()
    completed = not timed_out and proc.returncode == 0 and bool(lines) and lines[-1] == nonce
    if completed:
        stdout = "\n".join(lines[:-1]).rstrip("\n")
    return RunResult(proc.returncode, stdout, stderr, timed_out, completed)


def static_guard(code: str, extra_imports: Iterable[str] = ()) -> str | None:
    """The first construct in ``code`` that answers may not use, described; None if clean.

    Refused: imports outside :data:`ALLOWED_IMPORTS` (plus ``extra_imports``), names in
    :data:`FORBIDDEN_NAMES`, and dunder names or attributes (``__class__``, ``__code__``...).
    ``code`` must parse; a syntax error is reported as such.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        return f"syntax error on line {exc.lineno}: {exc.msg}"
    allowed = ALLOWED_IMPORTS | frozenset(extra_imports)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [("." * node.level) + (node.module or "")]
        for module in modules:
            if module.split(".")[0] not in allowed:
                return f"line {line}: importing `{module}` is not allowed here"
        if isinstance(node, ast.Name) and (
            node.id in FORBIDDEN_NAMES
            or (node.id.startswith("__") and node.id not in _ALLOWED_DUNDER_NAMES)
        ):
            return f"line {line}: `{node.id}` is not allowed here"
        if isinstance(node, ast.Attribute) and node.attr.startswith("__"):
            return f"line {line}: dunder attribute `{node.attr}` is not allowed here"
    return None
