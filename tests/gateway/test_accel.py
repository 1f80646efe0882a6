"""The record writer's compiled build (gateway.recording.accel): loaded only while it matches its
sources, and what it computes is what the sources compute."""

from __future__ import annotations

import ast
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.recording import accel
from tests.gateway.recorder_helpers import read_stored, running_writer, stream_draft

FIRST_PARTY = ("gateway", "traffic", "router", "serving", "rl_loop")


def _python(code: str, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=accel.ROOT,
        env={**os.environ, "SWITCHYARD_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


LOADED = """
import importlib, json, sys
from gateway.recording import accel
installed = accel.install(accel.default_dir())
for module in accel.COMPILED:
    importlib.import_module(module)
print(json.dumps({"installed": installed,
                  "files": {m: sys.modules[m].__file__ for m in accel.COMPILED}}))
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache of its own holding a current build: a copy of the one ``make setup`` made when
    it matches the sources (it does under ``make test``), else a fresh one (~25 s of mypyc and
    gcc)."""
    cache = tmp_path_factory.mktemp("cache")
    out = cache / "accel" / sys.implementation.cache_tag
    made = accel.default_dir()
    if made.is_dir() and accel.why_not(made) is None:
        shutil.copytree(made, out)
    else:
        accel.build(out)
    return cache


def _manifest(out: Path, **changes: object) -> None:
    out.mkdir(parents=True)
    manifest = {"python": sys.implementation.cache_tag, "sources": accel.source_hashes()}
    (out / accel.MANIFEST).write_text(json.dumps({**manifest, **changes}))


@pytest.mark.slow
def test_a_current_build_is_loaded_ahead_of_the_sources(built: Path) -> None:
    done = _python(LOADED, built)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["installed"] is True
    for module, file in report["files"].items():
        assert file.startswith(str(built)) and file.endswith(".so"), module


@pytest.mark.slow
def test_the_assemblers_tests_pass_against_the_build(built: Path) -> None:
    """The assemblers' own tests (hostile and generated streams included), run in a process
    that loaded the build instead of the sources."""
    code = (
        "import sys\n"
        "from gateway.recording import accel\n"
        "assert accel.install(accel.default_dir())\n"
        "import gateway.wire.assemble as a\n"
        "assert a.__file__.endswith('.so'), a.__file__\n"
        "import pytest\n"
        "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-m', '',"
        " 'tests/gateway/test_stream_template.py', 'tests/gateway/test_wire.py']))\n"
    )
    done = _python(code, built)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


@pytest.mark.slow
async def test_the_writer_process_runs_the_build_and_stores_assembled_answers(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SWITCHYARD_CACHE", str(built))
    drafts = {f"answer {i}": stream_draft(f"answer {i}") for i in range(20)}
    async with running_writer(tmp_path) as writer:
        for draft in drafts.values():
            writer.submit(draft)
    answers = await read_stored(tmp_path)
    assert sorted(a or "" for a in answers.values()) == sorted(drafts)
    err = capfd.readouterr().err
    assert "runs the compiled build" in err and "runs its sources" not in err


def test_a_build_older_than_its_sources_is_not_loaded(tmp_path: Path) -> None:
    out = tmp_path / "accel"
    _manifest(out, sources={**accel.source_hashes(), "gateway.wire.assemble": "0" * 64})
    assert "older than its sources" in (accel.why_not(out) or "")
    assert accel.install(out) is False


def test_a_build_for_another_python_is_not_loaded(tmp_path: Path) -> None:
    out = tmp_path / "accel"
    _manifest(out, python="cpython-39")
    assert "cpython-39" in (accel.why_not(out) or "")
    assert accel.install(out) is False


def test_no_build_leaves_the_sources_running(tmp_path: Path) -> None:
    assert "no build" in (accel.why_not(tmp_path / "nothing") or "")
    assert accel.install(tmp_path / "nothing") is False


def test_a_build_that_does_not_load_leaves_every_source_running(tmp_path: Path) -> None:
    out = tmp_path / "accel" / sys.implementation.cache_tag
    _manifest(out)
    for module in accel.COMPILED:  # current by its manifest, but not a loadable library
        ext = out.joinpath(*module.split(".")).with_name(
            module.rsplit(".", 1)[-1] + importlib.machinery.EXTENSION_SUFFIXES[0]
        )
        ext.parent.mkdir(parents=True, exist_ok=True)
        ext.write_bytes(b"not an ELF file")
    done = _python(LOADED, tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["installed"] is False
    assert all(f.endswith(".py") for f in report["files"].values())
    assert "does not load" in done.stderr


@pytest.mark.slow
def test_the_sources_imported_first_keep_a_current_build_out(built: Path) -> None:
    """In this process the sources are imported: a build is never mixed in afterwards."""
    out = built / "accel" / sys.implementation.cache_tag
    assert accel.why_not(out) is None
    assert "gateway.recording.draft" in sys.modules
    assert accel.install(out) is False


def test_every_first_party_type_the_build_relies_on_is_hashed() -> None:
    """A compiled module checks the types of what it imports: each first-party name it
    imports is defined in a compiled module or in one of accel.DEPENDS (a change to it makes
    the build stale)."""
    for module in accel.COMPILED:
        tree = ast.parse(accel.source_path(module).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.module is None:
                continue
            if node.module.split(".")[0] not in FIRST_PARTY:
                continue
            imported = importlib.import_module(node.module)
            for alias in node.names:
                value = getattr(imported, alias.name)
                home = getattr(value, "__module__", None) or node.module
                if isinstance(value, type(sys)):
                    home = value.__name__
                assert home in accel.SOURCES or home.split(".")[0] not in FIRST_PARTY, (
                    f"{module} imports {alias.name} from {home}, not in accel.SOURCES"
                )
