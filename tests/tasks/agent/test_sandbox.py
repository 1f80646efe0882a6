"""The agent sandbox: every tool works on the workspace only, and every limit stops and reports."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.agent.sandbox import SandboxConfig, SandboxRunner, Workspace
from tasks.agent.tools import FLAVOUR_TOOLS

ALL_TOOLS = tuple(dict.fromkeys(FLAVOUR_TOOLS["chat"] + FLAVOUR_TOOLS["responses"]))
FILES = {
    "pkg/__init__.py": "",
    "pkg/calc.py": 'def add(a, b):\n    """Sum."""\n    return a - b\n',
    "tests/test_calc.py": (
        "from pkg.calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    ),
}
QUICK = SandboxConfig(
    test_wall_s=8.0, test_cpu_s=4, output_chars=2000, test_output_kb=256, search_s=0.5
)


@pytest.fixture(scope="module")
def runner() -> SandboxRunner:
    return SandboxRunner.create(QUICK)


@pytest.fixture
def ws(runner: SandboxRunner) -> Iterator[Workspace]:
    with Workspace(FILES, runner, ALL_TOOLS) as workspace:
        yield workspace


def call(ws: Workspace, name: str, **arguments: object):
    return ws.execute(name, json.dumps(arguments))


def test_read_list_and_search_show_the_repository(ws: Workspace) -> None:
    read = call(ws, "read_file", path="pkg/calc.py")
    assert read.status == "ok" and "     3\t    return a - b" in read.text
    assert call(ws, "read_file", path="pkg/calc.py", start_line=3, end_line=3).text.endswith(
        "return a - b"
    )
    listing = call(ws, "list_dir", path=".", depth=2)
    assert listing.text.splitlines() == [
        "pkg/", "  __init__.py", "  calc.py", "tests/", "  test_calc.py"
    ]  # fmt: skip
    found = call(ws, "search", query="def add(")
    assert found.text == "pkg/calc.py:1: def add(a, b):"
    assert call(ws, "search", query=r"ret\w+", regex=True).text.startswith("pkg/calc.py:3:")
    assert call(ws, "search", query="nothing here").text.startswith("No matches")


def test_edits_change_the_repository_and_say_when_they_do_not(ws: Workspace) -> None:
    missing = call(ws, "edit", path="pkg/calc.py", old_string="a * b", new_string="a + b")
    assert missing.status == "error" and "not found" in missing.text
    same = call(ws, "edit", path="pkg/calc.py", old_string="a - b", new_string="a - b")
    assert same.status == "ok" and not same.changed
    done = call(ws, "edit", path="pkg/calc.py", old_string="a - b", new_string="a + b")
    assert done.status == "ok" and done.changed
    assert "a + b" in ws.snapshot()["pkg/calc.py"]
    both = call(ws, "edit", path="pkg/calc.py", old_string="a", new_string="x")
    assert both.status == "error" and "occurs" in both.text


def test_a_unified_diff_applies_and_an_empty_change_is_reported(ws: Workspace) -> None:
    patch = (
        "--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,3 +1,3 @@\n def add(a, b):\n"
        '     """Sum."""\n-    return a - b\n+    return a + b\n'
    )
    applied = call(ws, "apply_patch", patch=patch)
    assert applied.status == "ok" and applied.changed, applied.text
    again = call(ws, "apply_patch", patch=patch)
    assert again.status == "error" and "does not apply" in again.text


def test_every_path_outside_the_workspace_is_refused(ws: Workspace, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    for name, args in [
        ("read_file", {"path": str(outside)}),
        ("read_file", {"path": "../../../etc/passwd"}),
        ("list_dir", {"path": ".."}),
        ("search", {"query": "secret", "path": str(tmp_path)}),
        ("edit", {"path": "../escape.py", "old_string": "", "new_string": "x"}),
    ]:
        outcome = ws.execute(name, json.dumps(args))
        assert outcome.status == "error" and "outside the workspace" in outcome.text, name
    escape = "--- a/../escape.txt\n+++ b/../escape.txt\n@@ -0,0 +1 @@\n+x\n"
    assert call(ws, "apply_patch", patch=escape).status == "error"
    link = (
        "diff --git a/pkg/link b/pkg/link\nnew file mode 120000\n--- /dev/null\n+++ b/pkg/link\n"
        f"@@ -0,0 +1 @@\n+{outside}\n"
    )
    refused = call(ws, "apply_patch", patch=link)
    assert refused.status == "error" and "symbolic links" in refused.text
    assert not (ws.repo / "pkg" / "link").exists()
    assert not (ws.root / "escape.py").exists() and not (ws.root / "escape.txt").exists()


def test_broken_calls_are_invalid_and_run_nothing(ws: Workspace) -> None:
    before = ws.fingerprint()
    assert ws.execute("delete_repo", "{}").status == "invalid"
    assert ws.execute("edit", '{"path": "pkg/calc.py", "old_string": ').status == "invalid"
    assert ws.execute("edit", '["pkg/calc.py"]').status == "invalid"
    missing = ws.execute("edit", json.dumps({"path": "pkg/calc.py", "old_string": "a"}))
    assert missing.status == "invalid" and "new_string" in missing.text
    extra = call(ws, "read_file", path="pkg/calc.py", mode="rb")
    assert extra.status == "invalid"
    wrong_type = call(ws, "list_dir", path=".", depth="all")
    assert wrong_type.status == "invalid"
    assert ws.fingerprint() == before


def test_run_tests_reports_failures_and_passes(ws: Workspace) -> None:
    failing = call(ws, "run_tests")
    assert failing.status == "ok" and failing.tests is not None
    assert (failing.tests.passed, failing.tests.failed) == (0, 1)
    assert "assert -1 == 5" in failing.text
    call(ws, "edit", path="pkg/calc.py", old_string="a - b", new_string="a + b")
    passing = call(ws, "run_tests", paths=["tests/test_calc.py"])
    assert passing.tests is not None and passing.tests.all_passed
    assert call(ws, "run_tests", paths=["tests/test_nope.py"]).status == "error"


def _with_test(runner: SandboxRunner, body: str) -> Workspace:
    files = {**FILES, "tests/test_hostile.py": body}
    return Workspace(files, runner, ALL_TOOLS)


def test_a_test_that_loops_is_stopped_and_reported(runner: SandboxRunner) -> None:
    with _with_test(runner, "def test_spin():\n    while True:\n        pass\n") as ws:
        outcome = call(ws, "run_tests", paths=["tests/test_hostile.py"])
    assert outcome.status == "error"
    assert outcome.stopped_by is not None and "limit" in outcome.stopped_by
    assert "stopped by" in outcome.text


def test_a_test_that_writes_outside_the_repository_is_refused(
    runner: SandboxRunner, tmp_path: Path
) -> None:
    target = tmp_path / "planted.txt"
    body = f"def test_plant():\n    open({str(target)!r}, 'w').write('x')\n"
    with _with_test(runner, body) as ws:
        outcome = call(ws, "run_tests", paths=["tests/test_hostile.py"])
    assert outcome.tests is not None and outcome.tests.failed == 1
    assert "writing outside the working directory is refused" in outcome.text
    assert not target.exists()


def test_a_test_that_floods_its_output_is_bounded(runner: SandboxRunner) -> None:
    body = (
        "import sys\n\ndef test_flood():\n    sys.stdout.write('x' * 50_000_000)\n"
        "    assert False\n"
    )
    with _with_test(runner, body) as ws:
        outcome = call(ws, "run_tests", paths=["tests/test_hostile.py"])
    assert len(outcome.text) <= QUICK.output_chars + 100
    assert outcome.status == "error" and outcome.stopped_by == "the output size limit"


def test_tests_get_no_network(runner: SandboxRunner) -> None:
    body = (
        "import socket\n\ndef test_connect():\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
    )
    with _with_test(runner, body) as ws:
        outcome = call(ws, "run_tests", paths=["tests/test_hostile.py"])
    assert outcome.tests is not None and outcome.tests.failed == 1
    assert "PermissionError" in outcome.text or "Network is unreachable" in outcome.text


def test_large_files_and_listings_are_cut(runner: SandboxRunner) -> None:
    files = {**FILES, "pkg/big.py": "".join(f"x{i} = {i}\n" for i in range(5000))}
    with Workspace(files, runner, ALL_TOOLS) as ws:
        read = call(ws, "read_file", path="pkg/big.py")
    assert "characters cut" in read.text or "more lines" in read.text
    assert len(read.text) <= QUICK.output_chars + 100


# ---------------------------------------------------- limits on the tool calls themselves


def test_a_search_that_backtracks_forever_is_stopped_and_reported(runner: SandboxRunner) -> None:
    files = {**FILES, "pkg/data.py": "WORD = '" + "a" * 64 + "!'\n"}
    with Workspace(files, runner, ALL_TOOLS) as ws:
        outcome = call(ws, "search", query="(a|aa)+$", regex=True)
        assert outcome.status == "error"
        assert outcome.stopped_by == "the 0.5 s search time limit"
        assert "stopped by the 0.5 s search time limit" in outcome.text
        assert call(ws, "search", query="(a|aa)+!", regex=True).status == "ok"  # still usable


def test_a_link_out_of_the_repository_is_not_followed_by_any_tool(
    ws: Workspace, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("KEY = 1\n")
    (ws.repo / "pkg" / "out").symlink_to(outside)  # as a test run or a checkout could leave one
    for name, args in [
        ("edit", {"path": "pkg/out/planted.py", "old_string": "", "new_string": "x = 1\n"}),
        ("edit", {"path": "pkg/out/secret.py", "old_string": "KEY = 1", "new_string": "KEY = 2"}),
        ("read_file", {"path": "pkg/out/secret.py"}),
        ("list_dir", {"path": "pkg/out"}),
        ("search", {"query": "KEY", "path": "pkg/out"}),
    ]:
        outcome = ws.execute(name, json.dumps(args))
        assert outcome.status == "error" and "outside the workspace" in outcome.text, name
    assert call(ws, "search", query="KEY").text.startswith("No matches")  # not followed either
    assert sorted(p.name for p in outside.iterdir()) == ["secret.py"]
    assert (outside / "secret.py").read_text() == "KEY = 1\n"


def test_tool_calls_that_flood_their_output_or_the_disk_are_cut_or_refused(
    runner: SandboxRunner,
) -> None:
    many = {f"pkg/mod_{i:03}.py": f"VALUE_{i} = {i}\n" * 3 for i in range(300)}
    long_line = {"pkg/wide.py": "X = '" + "y" * 20_000 + "'\n"}
    with Workspace({**FILES, **many, **long_line}, runner, ALL_TOOLS) as ws:
        found = call(ws, "search", query="VALUE_")
        assert found.status == "ok" and "more matches" in found.text
        assert len(found.text) <= QUICK.output_chars + 100
        listing = call(ws, "list_dir", path="pkg")
        assert "more)" in listing.text or "characters cut" in listing.text
        assert len(listing.text) <= QUICK.output_chars + 100
        wide = call(ws, "read_file", path="pkg/wide.py")
        assert "characters cut" in wide.text and len(wide.text) <= QUICK.output_chars + 100
        huge = "z" * (QUICK.file_bytes + 1)
        grown = call(ws, "edit", path="pkg/big.py", old_string="", new_string=huge)
        assert grown.status == "error" and "larger than" in grown.text
        doubled = call(ws, "edit", path="pkg/wide.py", old_string="y", new_string="yyyy",
                        replace_all=True)  # fmt: skip
        assert doubled.status == "error" and "larger than" in doubled.text
        patch = "--- /dev/null\n+++ b/pkg/huge.py\n@@ -0,0 +1 @@\n+" + "q" * (3 * QUICK.file_bytes)
        assert call(ws, "apply_patch", patch=patch).status == "error"
        assert not (ws.repo / "pkg" / "big.py").exists() and not (ws.repo / "pkg/huge.py").exists()
