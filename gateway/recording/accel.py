"""The record writer's hot modules compiled with mypyc, and the loader that uses them only while
they match their sources.

Why: the writer process (:mod:`gateway.recording.child`) spends most of a streamed record's CPU
in the interpreter, half of it assembling the answer from the stream (:mod:`gateway.wire.assemble`,
:mod:`gateway.wire.stream_template`, :mod:`gateway.doors.anthropic.stream`) and building the
record (:mod:`gateway.recording.draft`). Compiled by mypyc (the compiler mypy ships, which black
and mypy itself are released with), those modules cut ``as_record``'s CPU by a quarter to two
fifths, and the whole writer's per record by up to a quarter (docs/recording.md, "The writer's
CPU a record: the compiled modules"). Only the writer process loads them; the serving process
runs the sources (its share of this code is a tuple and a pickle).

How they stay right:

- Built out of the tree (``$SWITCHYARD_CACHE/accel/<python tag>/``, by ``make setup`` or
  ``python -m gateway.recording.accel build``), never beside the sources, so an edited ``.py`` is
  never shadowed by an older ``.so``.
- A manifest holds the hash of every source the build read (:data:`SOURCES`); :func:`install`
  loads the compiled modules only if every hash still matches, all or none (compiled modules
  call each other directly, so a mix would run stale code), and only if each one imports.
  Otherwise the sources run and the reason is logged: no compiler, a stale build, another
  Python.
- The same tests run against both (``tests/gateway/test_accel.py`` runs the assemblers' tests
  in a process that loaded the build).

``python -m gateway.recording.accel run MODULE ARGS...`` runs ``MODULE`` as ``__main__`` with the
build installed: how the gateway starts its writer process.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import runpy
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Final

log = logging.getLogger("gateway.recording.accel")  # also when run as __main__

ROOT: Final = Path(__file__).resolve().parents[2]
# What is compiled (module names), in dependency order.
COMPILED: Final = (
    "gateway.wire.sse",
    "gateway.wire.stream_template",
    "gateway.wire.assemble",
    "gateway.doors.anthropic.stream",
    "gateway.recording.draft",
)
# First-party modules whose types the compiled ones rely on (mypyc checks a value's type where
# it crosses into compiled code): a change to them makes the build stale too.
DEPENDS: Final = ("traffic.store.records", "traffic.store.spool")
SOURCES: Final = COMPILED + DEPENDS
MANIFEST: Final = "manifest.json"


def default_dir() -> Path:
    """Where the build lives: ``$SWITCHYARD_CACHE/accel/<python tag>`` (the cache defaults to
    ``<repo>/.cache``)."""
    cache = os.environ.get("SWITCHYARD_CACHE") or str(ROOT / ".cache")
    return Path(cache) / "accel" / sys.implementation.cache_tag


def source_path(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def source_hashes() -> dict[str, str]:
    return {m: hashlib.sha256(source_path(m).read_bytes()).hexdigest() for m in SOURCES}


# -- build ----------------------------------------------------------------------------------
def build(out: Path) -> None:
    """Compile :data:`COMPILED` into ``out`` (replaced whole) and write its manifest. Raises
    :class:`RuntimeError` with the compiler's output when the build fails."""
    hashes = source_hashes()
    # mypyc names modules from the files' paths: given relative to the root, run from there.
    files = [str(source_path(m).relative_to(ROOT)) for m in COMPILED]
    with tempfile.TemporaryDirectory(prefix="switchyard-accel-") as tmp:
        # In a child process: setuptools' build state, and every file the build writes
        # (generated C, objects, mypy's cache), stay out of the tree and of this process.
        script = (
            "import sys\n"
            "from setuptools import setup\n"
            "from mypyc.build import mypycify\n"
            "tmp, files = sys.argv[1], sys.argv[2:]\n"
            "sys.argv = [sys.argv[0], 'build_ext', '--build-lib', tmp + '/lib',"
            " '--build-temp', tmp + '/obj']\n"
            "modules = mypycify(files, opt_level='3', target_dir=tmp + '/c',"
            " group_name='switchyard_accel')\n"
            "setup(name='switchyard-accel', ext_modules=modules)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, tmp, *files],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "MYPY_CACHE_DIR": f"{tmp}/mypy"},
        )
        if done.returncode != 0:
            raise RuntimeError(f"mypyc build failed:\n{done.stdout[-4000:]}{done.stderr[-4000:]}")
        if source_hashes() != hashes:
            raise RuntimeError("the sources changed while they were compiled; build again")
        if out.exists():
            shutil.rmtree(out)
        shutil.copytree(Path(tmp) / "lib", out)
    manifest = {"python": sys.implementation.cache_tag, "sources": hashes}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))


# -- load -----------------------------------------------------------------------------------
class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds each compiled module's extension in the build, ahead of its source."""

    def __init__(self, out: Path) -> None:
        self._paths = {m: _extension(out, m) for m in COMPILED}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        ext = self._paths.get(fullname)
        if ext is None:
            return None
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(ext))
        return importlib.util.spec_from_file_location(fullname, ext, loader=loader)


def _extension(out: Path, module: str) -> Path:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return out.joinpath(*module.split(".")).with_name(module.rsplit(".", 1)[-1] + suffix)


def why_not(out: Path) -> str | None:
    """Why the build in ``out`` cannot be used (None: it can)."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return f"no build in {out} (make setup, or python -m gateway.recording.accel build)"
    if manifest.get("python") != sys.implementation.cache_tag:
        return f"the build in {out} is for {manifest.get('python')}"
    if manifest.get("sources") != source_hashes():
        return (
            f"the build in {out} is older than its sources "
            "(python -m gateway.recording.accel build)"
        )
    missing = [m for m in COMPILED if not _extension(out, m).exists()]
    if missing:
        return f"the build in {out} lacks {', '.join(missing)}"
    return None


def install(out: Path) -> bool:
    """Load the compiled modules from ``out`` if they match their sources; True if they were.
    Call before anything imports them (a module already imported stays as it is: then nothing
    is installed)."""
    reason = why_not(out)
    if reason is None and any(m in sys.modules for m in COMPILED):
        reason = "the sources were imported first"
    if reason is not None:
        log.info("record writer runs its sources: %s", reason)
        return False
    finder = _CompiledFinder(out)
    sys.path.append(str(out))  # the shared library the modules' stubs import
    sys.meta_path.insert(0, finder)
    try:
        for module in COMPILED:
            importlib.import_module(module)
    except ImportError as exc:
        sys.meta_path.remove(finder)
        sys.path.remove(str(out))
        for module in COMPILED:
            sys.modules.pop(module, None)
        log.warning("record writer runs its sources: the build in %s does not load: %s", out, exc)
        return False
    log.info("record writer runs the compiled build in %s", out)
    return True


def main(argv: list[str] | None = None) -> None:
    """``python -m gateway.recording.accel build [--if-stale] [DIR]`` | ``... run MODULE
    [ARGS...]``"""
    parser = argparse.ArgumentParser(prog="python -m gateway.recording.accel", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="compile the modules (default: default_dir())")
    build_cmd.add_argument("out", nargs="?", type=Path, default=None)
    build_cmd.add_argument("--if-stale", action="store_true", help="only if not current")
    run_cmd = commands.add_parser("run", help="run MODULE as __main__, the build installed")
    run_cmd.add_argument("module")
    run_cmd.add_argument("args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "run":
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
        install(default_dir())
        sys.argv = [args.module, *args.args]
        runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        return
    out = args.out or default_dir()
    if args.if_stale and why_not(out) is None:
        print(f"gateway.recording.accel: {out} is current")
        return
    try:
        build(out)
    except (RuntimeError, OSError) as exc:  # the sources still run: say why, do not fail
        print(f"gateway.recording.accel: not built, the record writer runs its sources ({exc})")
        return
    print(f"gateway.recording.accel: built {len(COMPILED)} modules in {out}")


if __name__ == "__main__":
    main()
