"""Real coding clients, newest and pinned releases, through a gateway to the frontier simulator.

Each (client, version) with version in {newest, pinned} (the pinned run is skipped when the
registry's newest is the pin) is installed once per cache (``loadtests.real_clients.install``)
and run unmodified by its driver (``loadtests.real_clients.drivers``) against a gateway process
with the demo's config and a SQLite store (``tests/fixtures/real_clients_fixture.py``):

- one-shot: ``Say hello in five words. Do not use any tools.`` -> exit 0, a non-empty answer that
  the client printed, no tool executed (no request carries a tool's result), and for Claude Code
  fewer than 20 requests (its `Agent` tool once looped into 1,287);
- multi-step: ``Read greet.py, replace Helo with Hello in it, then run python3 greet.py and tell
  me what it printed.`` in a workspace holding ``greet.py`` (a git repository for aider) -> exit
  0, greet.py now prints ``Hello, world``, the client printed ``Hello, world``, and at least
  :data:`MIN_REQUESTS` requests reached the gateway (aider: 2, see there);
- each exchange recorded once: the store holds one row per request the gateway answered for the
  run (the run's key's rows == the ``switchyard_requests_total`` delta, no id twice).

Needs the npm registry and PyPI (installs; "newest" is asked at run time) and Node. Marked slow.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadtests.real_clients import (
    CLIENTS,
    ClientInstallError,
    ClientRun,
    InstalledClient,
    RunResult,
    install,
    resolve_version,
    run_client,
    versions_to_test,
)
from tests.fixtures.real_clients_fixture import RealClientStack, real_client_stack  # noqa: F401

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm (and Node) on PATH"),
]

ONE_SHOT = "Say hello in five words. Do not use any tools."
MULTI_STEP = (
    "Read greet.py, replace Helo with Hello in it, then run python3 greet.py and tell me what it "
    "printed."
)
GREET_BEFORE = 'print("Helo, world")\n'
HELLO = "Hello, world"
VERSIONS = ("newest", "pinned")
# Claude Code's one-shot: the command a user ran (`claude -p "..." --max-turns 4`).
ONE_SHOT_MAX_TURNS = 4
CLAUDE_CODE_ONE_SHOT_MAX_REQUESTS = 19
# Requests of the multi-step task: read, edit, run, answer = 4 for the agents; the test asks 3
# (a client may read and edit in one round). aider never runs a command unattended (its "Run
# shell command?" needs an explicit yes that --yes-always does not give) and has the file in its
# first request already: its episode is the edit and the commit message it asks for, 2.
MIN_REQUESTS = {"claude-code": 3, "codex": 3, "continue": 3, "aider": 2, "llm": 3}
# Where each client's requests go with the demo's routing: Claude Code's prompts pass the
# long-context rule (3000 tokens) to the Anthropic target; Codex's 17 kB instructions would too,
# so it calls the alias pinned to the OpenAI target (through the Responses door, passed through);
# Continue, aider and llm stay under it and take the default, the OpenAI target (chat door).
MODELS = {"codex": "gpt-4o-mini"}
TARGETS = {"claude-code": "frontier-anthropic"}
DEFAULT_TARGET = "frontier-openai"


class Installs:
    """Installs made this session (each client and version once), and the versions resolved."""

    def __init__(self) -> None:
        self.made: dict[tuple[str, str], InstalledClient] = {}

    def get(self, client: str, version: str) -> InstalledClient:
        if (client, version) not in self.made:
            try:
                versions = versions_to_test(client)
                if version not in versions:
                    pinned = resolve_version(client, "pinned")
                    pytest.skip(f"{client}: pinned {pinned} is also the newest release")
                self.made[(client, version)] = install(client, versions[version])
            except ClientInstallError as exc:
                pytest.fail(f"{client} {version}: {exc}")
        return self.made[(client, version)]


@pytest.fixture(scope="session")
def installs() -> Installs:
    return Installs()


@pytest.fixture(params=[(c, v) for c in CLIENTS for v in VERSIONS], ids=lambda p: f"{p[0]}-{p[1]}")
def client_version(request: pytest.FixtureRequest) -> tuple[str, str]:
    return request.param  # type: ignore[no-any-return]


def _tool_results(request: dict[str, Any]) -> int:
    """How many tool results a request carries back (any wire format)."""
    count = 0
    for message in request.get("messages") or []:
        if message.get("role") == "tool":
            count += 1
        content = message.get("content")
        if isinstance(content, list):
            count += sum(
                1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result"
            )
    for item in request.get("input") or []:
        if isinstance(item, dict) and str(item.get("type", "")).endswith("call_output"):
            count += 1
    return count


def _answer_text(row: dict[str, Any]) -> str:
    """The answer's text of a stored row (chat completion, Messages or Responses shape)."""
    answer = row.get("canonical_response") or row.get("response") or {}
    if answer.get("choices"):
        return str(answer["choices"][0].get("message", {}).get("content") or "")
    blocks = answer.get("content") or []
    for item in answer.get("output") or []:
        blocks.extend(item.get("content") or [])
    return "".join(str(b.get("text", "")) for b in blocks if isinstance(b, dict))


def _calls(row: dict[str, Any]) -> list[str]:
    """The tool calls of a stored row's answer, as ``name(arguments)`` (truncated)."""
    answer = row.get("canonical_response") or row.get("response") or {}
    found: list[tuple[str, Any]] = []
    for choice in answer.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            found.append((call["function"]["name"], call["function"].get("arguments")))
    for block in [*(answer.get("content") or []), *(answer.get("output") or [])]:
        if isinstance(block, dict) and block.get("type") in ("tool_use", "function_call"):
            found.append((block["name"], block.get("input") or block.get("arguments")))
    shown = [(n, a if isinstance(a, str) else json.dumps(a)) for n, a in found]
    return [f"{name}({args[:100]})" for name, args in shown]


def _explain(result: RunResult, rows: list[dict[str, Any]], stack: RealClientStack) -> str:
    summary = [
        f"  {r['endpoint']} -> {r['route_target']} {r['status']}, tool results in: "
        f"{_tool_results(r['request'] or {})}, calls: {_calls(r)} text: {_answer_text(r)[:80]!r}"
        for r in rows[:30]
    ]
    return (
        f"exit {result.exit_code}\n--- stdout (tail)\n{result.stdout[-2000:]}\n"
        f"--- stderr (tail)\n{result.stderr[-2000:]}\n--- {len(rows)} requests\n"
        + "\n".join(summary)
        + f"\n--- gateway log (tail)\n{stack.log_tail('gateway', 6)}"
    )


class Outcome:
    """One client run and what the gateway saw of it."""

    def __init__(self, result: RunResult, rows: list[dict[str, Any]], delta: float, why: str):
        self.result, self.rows, self.delta, self.why = result, rows, delta, why


def _run(
    stack: RealClientStack,
    installed: InstalledClient,
    workspace: Path,
    prompt: str,
    tag: str,
    **options: Any,
) -> Outcome:
    key = stack.new_key(f"{installed.name}-{installed.version}-{tag}")
    before = stack.requests_total()
    run = ClientRun(
        client=installed,
        workspace=workspace,
        gateway_url=stack.gateway_url,
        api_key=key.key,
        model=MODELS.get(installed.name, "auto"),
        home=workspace.parent / "home",
        **options,
    )
    result = run_client(run, prompt)
    delta = stack.requests_total() - before
    rows = stack.wait_rows(key.id, int(delta))
    return Outcome(result, rows, delta, _explain(result, rows, stack))


def _routed_as_the_demo_routes(client: str, outcome: Outcome) -> None:
    target = TARGETS.get(client, DEFAULT_TARGET)
    assert {r["route_target"] for r in outcome.rows} == {target}, outcome.why


def _recorded_once(outcome: Outcome) -> None:
    ids = [r["id"] for r in outcome.rows]
    assert len(ids) == len(set(ids)), outcome.why
    assert len(outcome.rows) == outcome.delta, outcome.why


@pytest.fixture
def workspace(tmp_path: Path) -> Iterator[Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    yield ws


def test_one_shot(
    client_version: tuple[str, str],
    installs: Installs,
    real_client_stack: RealClientStack,  # noqa: F811
    workspace: Path,
) -> None:
    client, version = client_version
    installed = installs.get(client, version)
    if client == "aider":
        _git_repo(workspace)
    turns = {"max_turns": ONE_SHOT_MAX_TURNS} if client == "claude-code" else {}
    outcome = _run(real_client_stack, installed, workspace, ONE_SHOT, "one-shot", **turns)
    assert outcome.result.exit_code == 0, outcome.why
    assert outcome.rows, outcome.why
    answer = _answer_text(outcome.rows[-1]).strip()
    assert answer, outcome.why
    assert answer.splitlines()[0][:40] in outcome.result.stdout, outcome.why
    assert all(_tool_results(r["request"] or {}) == 0 for r in outcome.rows), outcome.why
    if client == "claude-code":
        assert len(outcome.rows) <= CLAUDE_CODE_ONE_SHOT_MAX_REQUESTS, outcome.why
    _routed_as_the_demo_routes(client, outcome)
    _recorded_once(outcome)


def _git_repo(workspace: Path) -> None:
    """``workspace`` as a git repository with what it holds committed (aider's setting)."""
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=workspace, check=True)
    subprocess.run([*git, "add", "-A"], cwd=workspace, check=True)
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "-m", "start"], cwd=workspace, check=True
    )


def test_multi_step(
    client_version: tuple[str, str],
    installs: Installs,
    real_client_stack: RealClientStack,  # noqa: F811
    workspace: Path,
) -> None:
    client, version = client_version
    installed = installs.get(client, version)
    (workspace / "greet.py").write_text(GREET_BEFORE)
    if client == "aider":
        _git_repo(workspace)
    outcome = _run(real_client_stack, installed, workspace, MULTI_STEP, "multi-step")
    printed = subprocess.run(
        ["python3", "greet.py"], cwd=workspace, capture_output=True, text=True, timeout=60
    )
    why = f"greet.py now: {(workspace / 'greet.py').read_text()!r}\n{outcome.why}"
    assert outcome.result.exit_code == 0, why
    assert printed.stdout.strip() == HELLO, why
    assert HELLO in outcome.result.stdout, why
    assert len(outcome.rows) >= MIN_REQUESTS[client], why
    _routed_as_the_demo_routes(client, outcome)
    _recorded_once(outcome)


def test_the_drivers_know_every_client() -> None:
    from loadtests.real_clients.drivers import BUILDERS

    assert set(BUILDERS) == set(CLIENTS)
    assert json.dumps(sorted(MIN_REQUESTS)) == json.dumps(sorted(CLIENTS))


def test_codex_as_the_readme_configures_it(
    installs: Installs,
    real_client_stack: RealClientStack,  # noqa: F811
    workspace: Path,
) -> None:
    """The README's Codex config (``model = "auto"``): its long instructions pass the demo's
    long-context rule, so the Responses door is translated to the Anthropic target."""
    installed = installs.get("codex", "newest")
    (workspace / "greet.py").write_text(GREET_BEFORE)
    key = real_client_stack.new_key("codex-readme")
    before = real_client_stack.requests_total()
    run = ClientRun(
        client=installed,
        workspace=workspace,
        gateway_url=real_client_stack.gateway_url,
        api_key=key.key,
        model="auto",
        home=workspace.parent / "home",
    )
    result = run_client(run, MULTI_STEP)
    delta = real_client_stack.requests_total() - before
    rows = real_client_stack.wait_rows(key.id, int(delta))
    outcome = Outcome(result, rows, delta, _explain(result, rows, real_client_stack))
    assert result.exit_code == 0, outcome.why
    assert HELLO in result.stdout, outcome.why
    assert 'print("Hello, world")' in (workspace / "greet.py").read_text(), outcome.why
    assert {r["route_target"] for r in rows} == {"frontier-anthropic"}, outcome.why
    _recorded_once(outcome)
