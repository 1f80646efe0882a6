"""Where the gateway's CPU goes under load: py-spy samples, folded into hot spots.

One recording, ``py-spy record --format raw --threads --native`` (one line per distinct stack,
``thread (TID): NAME;frame;...;leaf N``, root first, each frame ``function (path:line)``, C
frames included), read two ways:

- ``native``: every frame; shows what Python frames hide: syscalls (``write`` on sockets), the
  garbage collector (``gc_collect_main``), uvloop and httptools internals;
- ``python``: C frames dropped, so each sample lands on the Python function that was running
  (a ``write`` syscall on the function that called ``transport.write``, a collection on the
  function whose allocation triggered it).

py-spy pauses the gateway for each sample (its default; ``--nonblocking`` tears stacks). Only
the main thread counts (the event loop; the others are idle thread pools, which py-spy cannot
always tell from busy ones), and samples whose C leaf is a wait (``epoll_pwait``, ``futex``
...) are idle and left out, so every share is of busy main-thread samples. Where ``--native``
is refused, the recording falls back to Python frames only, and time in uvloop's C code (the
poll included) then shows as the leaf ``Runner.run``.

Read from the samples:

- *self* time of a function: samples where it is the leaf;
- *inclusive* time: samples where it is anywhere on the stack (once per stack; frames present
  in every sample, such as ``main``, are not listed);
- *by package*: self samples grouped by the package of the leaf (Switchyard's own code,
  uvicorn, starlette, fastapi, aiohttp, pydantic, prometheus_client, asyncio, ...; natively
  also ``libc``, mostly syscalls, and ``cpython``, the interpreter and allocator);
- *gc*: samples with the cyclic garbage collector anywhere on the stack.

Open the raw files in https://www.speedscope.app (it reads this collapsed-stack format) or
feed them to ``flamegraph.pl``.

Install py-spy into the project venv (``.venv/bin/pip install py-spy``); it needs ptrace rights
on the gateway (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Final

_FRAME: Final = re.compile(r"^(?P<func>.*?) \((?P<path>[^()]*?)(?::(?P<line>\d+))?\)$")
# First match wins: the package a frame's file belongs to.
PACKAGES: Final[tuple[tuple[str, str], ...]] = (
    ("/gateway/", "switchyard"),
    ("/router/", "switchyard"),
    ("gateway/", "switchyard"),
    ("router/", "switchyard"),
    ("uvicorn/", "uvicorn"),
    ("starlette/", "starlette"),
    ("fastapi/", "fastapi"),
    ("aiohttp/", "aiohttp"),
    ("yarl/", "aiohttp"),
    ("multidict/", "aiohttp"),
    ("pydantic", "pydantic"),
    ("prometheus_client/", "prometheus_client"),
    ("opentelemetry/", "opentelemetry"),
    ("httptools/", "httptools"),
    ("uvloop/", "uvloop"),
    ("asyncio/", "asyncio"),
    ("anyio/", "anyio"),
    ("orjson", "orjson"),
    ("litellm/", "litellm"),
    # Native frames (the --native recording).
    ("loop.c", "uvloop"),
    ("_http_parser.c", "httptools"),
    ("libc.so", "libc"),
    ("libpython", "cpython"),
    ("object.h", "cpython"),
    ("Objects/", "cpython"),
    ("Python/", "cpython"),
    ("Modules/", "cpython"),
)
GC_FUNCTIONS: Final = ("gc_collect", "collect_with_callback", "collect_generations")
IDLE_LEAVES: Final = frozenset(
    {
        "epoll_wait",
        "epoll_pwait",
        "poll",
        "select",
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "futex",
        "syscall",
        "sem_wait",
        "sem_timedwait",
        "nanosleep",
        "clock_nanosleep",
    }
)
MAIN_THREAD: Final = "MainThread"
RECORD_FLAGS: Final = ("--threads", "--native")
FALLBACK_FLAGS: Final = ("--threads",)
VIEWS: Final = ("python", "native")


@dataclass(frozen=True, slots=True)
class HotSpot:
    function: str  # "func (path:line)" without the line for inclusive entries
    package: str
    samples: int
    percent: float


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    total_samples: int  # busy main-thread samples: the 100% of every share below
    idle_samples: int  # main-thread samples in a wait, left out
    other_thread_samples: int  # left out
    gc_percent: float
    by_package: list[HotSpot]
    top_self: list[HotSpot]
    top_inclusive_switchyard: list[HotSpot]
    top_inclusive_frameworks: list[HotSpot]


def pyspy_executable() -> Path | None:
    beside = Path(sys.executable).with_name("py-spy")
    if beside.exists():
        return beside
    found = shutil.which("py-spy")
    return Path(found) if found else None


def record_command(
    pyspy: Path, pid: int, seconds: float, out: Path, extra: tuple[str, ...] = (), rate: int = 200
) -> list[str]:
    return [
        str(pyspy),
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        str(rate),
        "--format",
        "raw",
        "--output",
        str(out),
        *extra,
    ]


def package_of(path: str) -> str:
    for marker, package in PACKAGES:
        if marker in path:
            return package
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if path.endswith(".c") or ".c:" in path or ".so" in path:
        return "native/other"
    if path.startswith("<") or "/lib/python3" in path or "/" not in path:
        return "stdlib/other"
    return "other"


def _short(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3.11/", "/work/main/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def parse_frame(frame: str) -> tuple[str, str, str]:
    """(function, path, line) of one ``func (path:line)`` frame."""
    match = _FRAME.match(frame.strip())
    if match is None:
        return frame.strip(), "", ""
    return match["func"], match["path"], match["line"] or ""


def _spots(counter: Counter[tuple[str, str]], total: int, n: int) -> list[HotSpot]:
    return [
        HotSpot(function=name, package=pkg, samples=count, percent=100 * count / total)
        for (name, pkg), count in counter.most_common(n)
    ]


def _is_python(frame: tuple[str, str, str]) -> bool:
    path = frame[1]
    return path.endswith(".py") or path.startswith("<")


def summarize(raw: str, view: str = "native", top: int = 15) -> ProfileSummary:
    """Hot spots of a raw recording; ``view="python"`` drops C frames first."""
    by_package: Counter[tuple[str, str]] = Counter()
    self_time: Counter[tuple[str, str]] = Counter()
    inclusive: Counter[tuple[str, str]] = Counter()
    total = idle = other_threads = gc = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        parts = stack.split(";")
        if parts[0].startswith("thread ("):
            if parts[0].partition("): ")[2] != MAIN_THREAD:
                other_threads += count
                continue
            parts = parts[1:]
        frames = [parse_frame(f) for f in parts if "(" in f]
        if not frames:
            continue
        if frames[-1][0] in IDLE_LEAVES:
            idle += count
            continue
        total += count
        if any(f[0].startswith(GC_FUNCTIONS) for f in frames):
            gc += count
        if view == "python":
            frames = [f for f in frames if _is_python(f)] or frames[:1]
        func, path, lineno = frames[-1]
        leaf_pkg = package_of(path)
        by_package[(leaf_pkg, leaf_pkg)] += count
        self_time[(f"{func} ({_short(path)}:{lineno})", leaf_pkg)] += count
        seen: set[tuple[str, str]] = set()
        for func, path, _ in frames:
            seen.add((f"{func} ({_short(path)})", package_of(path)))
        for key in seen:
            inclusive[key] += count
    if total == 0:
        return ProfileSummary(0, idle, other_threads, 0.0, [], [], [], [])
    inclusive = Counter({k: v for k, v in inclusive.items() if v < total})
    own = Counter({k: v for k, v in inclusive.items() if k[1] == "switchyard"})
    not_frameworks = ("switchyard", "stdlib/other", "other", "native/other", "libc", "cpython")
    frameworks = Counter({k: v for k, v in inclusive.items() if k[1] not in not_frameworks})
    return ProfileSummary(
        total_samples=total,
        idle_samples=idle,
        other_thread_samples=other_threads,
        gc_percent=100 * gc / total,
        by_package=[
            HotSpot(function=pkg, package=pkg, samples=c, percent=100 * c / total)
            for (pkg, _), c in by_package.most_common()
        ],
        top_self=_spots(self_time, total, top),
        top_inclusive_switchyard=_spots(own, total, top),
        top_inclusive_frameworks=_spots(frameworks, total, top),
    )


def start_recording(
    pid: int, seconds: float, out: Path, extra: tuple[str, ...] = ()
) -> subprocess.Popen[bytes] | None:
    """py-spy recording ``pid`` in the background (``extra``: more py-spy flags), or None when
    py-spy is not installed."""
    pyspy = pyspy_executable()
    if pyspy is None:
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        record_command(pyspy, pid, seconds, out, extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
