"""The import direction of the README's "Architecture" section, enforced on the source tree.

Each package imports itself and what its line names, nothing else of ours:

router   -> (nothing of the project): pure decisions
serving  -> (nothing of the project)
traffic  -> (nothing of the project): the record's store and its dataset exporters
tasks    -> (nothing of the project): task families, verifiers, the agent sandbox
gateway  -> router, traffic (it writes the record, serves exports over its admin API and CLI)
rl_loop  -> traffic (reads the record, builds its datasets in process), serving, router, tasks
loadtests-> router (its pure selectors and scorer, driven by simulations), tasks (what the
            simulated clients send and the simulator's oracle answers) and serving.processes
            (starting and stopping child processes only); the gateway, serving and the store
            are reached over HTTP or a command line

Every package may also import ``serving.names``: the strings processes agree on (the local
model's name, the admin token's environment variable), which imports nothing itself.

Rooms: a folder inside a package with a rule of its own, which replaces its package's rule for
every module under it. ``loadtests/bench`` is the benchmark room: a benchmark is an orchestrator
(it starts and measures the production code itself, in process or as children), so like
``scripts/`` (not a package, not checked) it may import every package. No module is exempt.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("gateway", "router", "serving", "traffic", "tasks", "rl_loop", "loadtests")

SHARED_NAMES = "serving.names"
# What each package may import besides itself.
ALLOWED: dict[str, tuple[str, ...]] = {
    "router": (SHARED_NAMES,),
    "serving": (),
    "traffic": (SHARED_NAMES,),
    "tasks": (SHARED_NAMES,),
    "gateway": ("router", "traffic", SHARED_NAMES),
    "rl_loop": ("traffic", "serving", "router", "tasks"),
    "loadtests": ("router", "tasks", "serving.processes", SHARED_NAMES),
}
# Rooms with a rule of their own (a folder, relative to the repository root): what they may
# import besides their own package.
ROOMS: dict[str, tuple[str, ...]] = {
    "loadtests/bench": PACKAGES,  # orchestrators: every benchmark measures the real code
}


def _project_imports(path: Path) -> list[tuple[int, str]]:
    """The project's modules ``path`` imports (``from gateway import serve`` names
    ``gateway.serve``: a package's own import names its module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in PACKAGES:
                found.extend((node.lineno, f"{node.module}.{a.name}") for a in node.names)
            else:
                found.append((node.lineno, node.module))
    return [(n, m) for n, m in found if m.split(".")[0] in PACKAGES]


def _allowed(module: str, rules: tuple[str, ...]) -> bool:
    return any(module == r or module.startswith(r + ".") for r in rules)


def rules_for(path: Path) -> tuple[str, ...]:
    """What the module at ``path`` may import: its package, plus its room's rule (the deepest
    room holding it) or else its package's."""
    relative = path.relative_to(ROOT)
    package = relative.parts[0]
    rooms = [room for room in ROOMS if relative.is_relative_to(room)]
    extra = ROOMS[max(rooms, key=len)] if rooms else ALLOWED[package]
    return (package, *extra)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_the_architecture_allows(package: str) -> None:
    violations = []
    for path in sorted((ROOT / package).rglob("*.py")):
        rules = rules_for(path)
        for lineno, module in _project_imports(path):
            if not _allowed(module, rules):
                violations.append(f"{path.relative_to(ROOT)}:{lineno} imports {module}")
    assert not violations, "\n".join(violations)


def test_every_room_is_a_folder_of_a_package() -> None:
    for room in ROOMS:
        assert (ROOT / room).is_dir(), room
        assert Path(room).parts[0] in PACKAGES, room


def test_the_rule_catches_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from gateway.app import create_app\nimport router.policy\n")
    modules = [m for _, m in _project_imports(bad)]
    assert not all(_allowed(m, rules_for(ROOT / "router" / "bad.py")) for m in modules)
    # a room's rule holds under it only: the benchmark room may, the rest of loadtests may not
    assert _allowed("rl_loop.train", rules_for(ROOT / "loadtests" / "bench" / "kv" / "run.py"))
    assert not _allowed("rl_loop.train", rules_for(ROOT / "loadtests" / "kv" / "workload.py"))


def test_the_shared_names_import_nothing_of_the_project() -> None:
    assert _project_imports(ROOT / "serving" / "names.py") == []


# The gateway's rooms, bottom floor first (docs/architecture.md draws them). A module imports
# its own room and the floors below, never a floor above: nothing at the bottom knows what is
# built on it. A room is a folder (``doors``) or a top-level module (``state``).
GATEWAY_FLOORS: tuple[tuple[str, ...], ...] = (
    ("errors", "metrics", "resilience", "redis_scripts", "client_watch", "memory_trim"),
    ("background", "in_flight", "local"),  # shared helpers; local: tokenizers and KV events
    ("auth",),  # keys, rate limits, budgets, the admin-login throttle
    ("fleet",),  # the fleet's transport: this process alone, or Redis
    ("config",),  # the YAML file, strict; composes the sections of the rooms below
    # provider formats' shared facts; spans; the supervisor; secrets found and put back
    ("wire", "tracing", "workers", "secrets"),
    ("backends", "recording"),  # where requests go; how records leave
    ("routing",),  # the one decision, the one reload authority, the back-end set
    ("state",),  # plain data holding the parts above
    ("access", "startup"),  # the admin credential; building the state
    ("doors",),  # the inference doors over one skeleton; an exchange's end and record
    ("admin",),  # the admin API, operations, CLI subcommands
    ("console",),  # the ops console
    ("app",),
    ("serve",),
    ("cli", "__main__"),
)


def _gateway_room(module: str) -> str:
    """The room of a ``gateway.*`` module: its folder, or the module itself at the top."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _gateway_imports(path: Path) -> list[tuple[int, str]]:
    """``gateway.*`` modules ``path`` imports."""
    return [(n, m) for n, m in _project_imports(path) if m.startswith("gateway.")]


def test_the_gateway_rooms_import_downward_only() -> None:
    floor = {room: i for i, rooms in enumerate(GATEWAY_FLOORS) for room in rooms}
    gateway = ROOT / "gateway"
    listed = {p.stem if p.is_file() else p.name for p in gateway.iterdir()}
    listed -= {"__init__", "__pycache__", "py.typed"}
    assert listed <= set(floor), f"rooms without a floor: {sorted(listed - set(floor))}"
    violations = []
    for path in sorted(gateway.rglob("*.py")):
        own = _gateway_room(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if own == "__init__":
            continue
        for lineno, module in _gateway_imports(path):
            room = _gateway_room(module)
            if room != own and floor[room] > floor[own]:
                violations.append(f"{path.relative_to(ROOT)}:{lineno} imports {module} (up)")
    assert not violations, "\n".join(violations)


MAX_MODULE_LINES = 500  # split by responsibility beyond this (STYLE.md)
MAX_DOCSTRING_LINES = 40  # the contract and the algorithm; evidence goes to docs/


@pytest.mark.parametrize("package", PACKAGES)
def test_modules_stay_small_and_their_headers_short(package: str) -> None:
    too_long = []
    for path in sorted((ROOT / package).rglob("*.py")):
        text = path.read_text()
        doc = ast.get_docstring(ast.parse(text), clean=False) or ""
        lines, doc_lines = text.count("\n"), doc.count("\n") + 1 if doc else 0
        if lines > MAX_MODULE_LINES or doc_lines > MAX_DOCSTRING_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {lines} lines, docstring {doc_lines}")
    assert not too_long, "\n".join(too_long)
