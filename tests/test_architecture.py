"""The import direction of the README's "Architecture" section, enforced on the source tree.

router   -> (nothing of the project)
serving  -> (nothing of the project)
traffic  -> (nothing of the project): the record's store and its dataset exporters
gateway  -> router, traffic (it writes the record, serves exports over its admin API and CLI)
rl_loop  -> traffic (reads the record, builds its datasets in process), serving, router
loadtests-> router (its pure selectors and scorer, driven by simulations) and
            serving.processes (starting and stopping child processes only); the gateway, serving
            and the store are reached over HTTP or a command line

Every package may also import ``serving.names``: the strings processes agree on (the local
model's name, the admin token's environment variable), which imports nothing itself.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "router", "serving", "traffic", "rl_loop", "loadtests")

SHARED_NAMES = "serving.names"
ALLOWED: dict[str, tuple[str, ...]] = {
    "router": ("router", SHARED_NAMES),
    "serving": ("serving",),
    "traffic": ("traffic", SHARED_NAMES),
    "gateway": ("gateway", "router", "traffic", SHARED_NAMES),
    "rl_loop": ("rl_loop", "traffic", "serving", "router"),
    "loadtests": ("loadtests", "router", "serving.processes", SHARED_NAMES),
}


def _project_imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return [(n, m) for n, m in found if m.split(".")[0] in PACKAGES]


# Orchestrators: they start every part of the system (like scripts/demo.py) and are exempt.
ORCHESTRATORS = {
    "loadtests/bench_kv.py",
    "loadtests/hostile_run.py",  # --with-vllm boots a real replica
    "loadtests/bench_routing.py",  # the RL loop's outcome type; the store is read in routing_items
    "loadtests/routing_items.py",  # bench_routing's reader of the store and the RL loop's verdicts
    "rl_loop/bench_train.py",  # `make bench-train`: the task families' data and verifier
    "loadtests/agent/rl_environment.py",  # the agent sandbox behind rl_loop.agent's protocol
}


def _allowed(module: str, rules: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in rules)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_the_architecture_allows(package: str) -> None:
    violations = []
    for path in sorted((ROOT / package).rglob("*.py")):
        if str(path.relative_to(ROOT)) in ORCHESTRATORS:
            continue
        for lineno, module in _project_imports(path):
            if not _allowed(module, ALLOWED[package]):
                violations.append(f"{path.relative_to(ROOT)}:{lineno} imports {module}")
    assert not violations, "\n".join(violations)


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gateway.app import create_app\nimport router.policy\n")
    modules = [m for _, m in _project_imports(bad)]
    assert not all(_allowed(m, ALLOWED["router"]) for m in modules)


def test_the_shared_names_import_nothing_of_the_project() -> None:
    assert _project_imports(ROOT / "serving" / "names.py") == []
