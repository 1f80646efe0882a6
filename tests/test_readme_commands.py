"""Every shell command README.md shows works, and CI checks each one.

Which README text is a command (:func:`tests.readme_commands.readme_commands`):

1. each line of a fenced block tagged ``bash`` (``sh``, ``shell``): a line ending in ``\\``
   joined with the next, ``#`` comments dropped (a whole line, or from `` #`` outside quotes),
   spaces collapsed, empty lines skipped; other fenced blocks hold no commands;
2. outside fenced blocks, each inline code span (it may wrap onto the next line) whose first
   word after any ``NAME=value`` assignments is ``make``, ``switchyard``, ``python``,
   ``python3``, ``docker``, ``kill``, ``curl``, ``codex`` or ``claude``, followed by at least one
   more word: `make demo` and `kill -HUP <pid>` are commands; `curl` (a word of a sentence),
   `HOSTILE_VLLM=1` (a setting) and `POST /admin/reload` (HTTP) are not.

A command shown twice is one. ``docs/readme_commands.yaml`` lists them, in README order, and must
match the README both ways, so neither can rot. Each entry is checked as it says:

- ``run``: executed as written by ``bash -c`` in a work directory where
  ``.cache/demo/switchyard.yaml`` is the config of a demo-style gateway this test starts
  (``tests/fixtures/demo_stack.py``: ``switchyard serve`` with the demo's config on the frontier
  simulator process, the ``local`` target's replica the simulator, an API key made through the
  admin API, recorded chat traffic and one agent episode), with the venv's ``switchyard`` and
  ``python`` first on ``PATH``, the admin token in ``$SWITCHYARD_ADMIN_TOKEN`` and
  ``COLUMNS=80``. Placeholders and the demo's addresses become the stack's
  (:data:`tests.readme_commands.PLACEHOLDERS`: ``<yaml>`` the demo config's path, ``<key>`` the
  API key, ``<key id>`` the id ``keys create`` printed, ``<episode id>`` the agent's episode,
  ``<pid>`` the gateway's, ``<candidate state>`` a state file not written yet, i.e. an unfitted
  candidate; ``127.0.0.1:8080`` the gateway, ``127.0.0.1:8000`` the local replica, ``--port
  8901`` a free port); ``[optional arguments]`` are all given. The entry's ``run`` names the
  check below (:data:`CHECKS`): exit status 0 and what the command is for (counts that match the
  traffic sent, a dataset with rows and its manifest, a key listed then revoked, a drain seen in
  the fleet's status, a reload seen in the next answer's headers, a table within 80 columns).
- ``covered_by``: the named test exists (its file parsed, the function found).
- ``dry``: ``make -n`` of the target exits 0 and prints each of ``names``; ``help`` exits 0;
  ``compose`` parses, and validates with ``docker compose config`` where the client has it.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from loadtests.bench.servers import ServerFleet, free_port
from tests.fixtures.demo_stack import CHAT_MODELS, DemoStack, command_env, start_demo_stack
from tests.readme_commands import (
    COMMANDS_FILE,
    README,
    REPO,
    Entry,
    load_entries,
    readme_commands,
    substitute,
)

COMMAND_TIMEOUT_S = 120
# Started before the others and read at their turn: the replay imports torch (15-20 s here), and
# reads only what the stack recorded before any command ran.
START_EARLY = frozenset({"replay"})
WIDTH = 80


SAMPLE = """Run `make demo` (it prints a `curl` line; set `HOSTILE_VLLM=1` or call
`POST /admin/reload`), then `switchyard traffic
summary --config <yaml>` and `make demo` again.

```bash
make test   # every test
# a comment line
ANTHROPIC_BASE_URL=http://h:1 claude \\
  -p "say # not a comment"
```

```
python -m not.a.command --in a drawing
```
"""


def test_the_rule_reads_shell_blocks_and_command_spans() -> None:
    assert readme_commands(SAMPLE) == [
        "make demo",
        "switchyard traffic summary --config <yaml>",
        "make test",
        'ANTHROPIC_BASE_URL=http://h:1 claude -p "say # not a comment"',
    ]


def test_the_list_has_every_readme_command_and_only_those() -> None:
    shown = readme_commands(README.read_text())
    listed = [e.command for e in load_entries()]
    missing = [c for c in shown if c not in listed]
    stale = [c for c in listed if c not in shown]
    assert not missing, f"README commands without an entry in {COMMANDS_FILE.name}: {missing}"
    assert not stale, f"{COMMANDS_FILE.name} entries the README no longer shows: {stale}"
    assert len(set(listed)) == len(listed), "an entry is listed twice"


def test_each_entry_says_how_it_is_checked() -> None:
    for entry in load_entries():
        if entry.check == "run":
            assert entry.run in CHECKS, f"{entry.command}: no check named {entry.run!r}"
        elif entry.check == "covered_by":
            assert entry.covered_by and entry.reason, entry.command
        else:
            assert entry.check == "dry", f"{entry.command}: unknown check {entry.check!r}"
            assert entry.reason and (entry.names or entry.help or entry.compose), entry.command
            assert not entry.names or entry.command.startswith("make "), entry.command
    used = {e.run for e in load_entries() if e.check == "run"}
    assert set(CHECKS) == used, f"checks no entry runs: {set(CHECKS) - used}"


def _test_function_exists(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in ast.walk(tree)
    )


def test_covered_commands_name_tests_that_exist() -> None:
    for entry in load_entries():
        if entry.check != "covered_by":
            continue
        assert entry.covered_by is not None
        file, _, name = entry.covered_by.partition("::")
        path = REPO / file
        assert path.is_file(), f"{entry.command}: {file} does not exist"
        assert name, f"{entry.command}: name the test in {file}"
        assert name.startswith("test_"), entry.covered_by
        assert _test_function_exists(path, name), f"{entry.command}: no {entry.covered_by}"


def _shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )


def _dry_check(entry: Entry, env: dict[str, str]) -> None:
    if entry.names:
        target = entry.command.split()[1]
        done = _shell(f"make -n {target}", REPO, env)
        assert done.returncode == 0, f"make -n {target}: {done.stderr}"
        for name in entry.names:
            assert name in done.stdout, f"make -n {target} does not run {name}:\n{done.stdout}"
    if entry.help:
        done = _shell(entry.help, REPO, env)
        assert done.returncode == 0, f"{entry.help}: {done.stderr[-2000:]}"
    if entry.compose:
        compose = yaml.safe_load((REPO / entry.compose).read_text())
        assert compose["services"], entry.compose
        version = _shell("docker compose version", REPO, env)
        if version.returncode == 0:  # the client validates the file without an engine
            done = _shell(f"docker compose -f {entry.compose} config -q", REPO, env)
            assert done.returncode == 0, done.stderr


def test_dry_commands_are_valid_commands() -> None:
    env = command_env("unused")
    for entry in load_entries():
        if entry.check == "dry":
            _dry_check(entry, env)


# --- run: each check gets the command as substituted, and the stack --------------------------


class Run:
    """The running stack, values for placeholders, and how to run a command there."""

    def __init__(self, stack: DemoStack, servers: ServerFleet) -> None:
        self.stack = stack
        self.servers = servers
        self.values: dict[str, object] = {
            "api_key": stack.api_key,
            "episode_id": stack.episode_id,
            "candidate_state": stack.workdir / "candidate_state.json",
            "gateway_pid": stack.gateway.pid,
            "gateway_url": stack.gateway.base_url,
            "replica_url": stack.sim.base_url,
            "free_port": free_port(),
        }
        self.early: dict[str, subprocess.Popen[str]] = {}
        self.sent = 0  # requests the checks sent the gateway, after the stack's traffic

    def start_early(self, command: str) -> None:
        """Start ``command`` now, in the background; :meth:`shell` waits for it later."""
        self.early[command] = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.stack.workdir,
            env=self.stack.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def shell(self, command: str) -> subprocess.CompletedProcess[str]:
        early = self.early.pop(command, None)
        if early is None:
            done = _shell(command, self.stack.workdir, self.stack.env)
        else:
            out, err = early.communicate(timeout=COMMAND_TIMEOUT_S)
            done = subprocess.CompletedProcess(early.args, early.returncode, out, err)
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    def stop_early(self) -> None:
        for process in self.early.values():
            process.kill()
            process.communicate()

    def fleet(self) -> dict[str, Any]:
        url = self.stack.gateway.base_url + "/admin/fleet"
        answer: dict[str, Any] = httpx.get(url, headers=self.stack.admin(), timeout=10).json()
        return answer


def _fits(text: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > WIDTH]
    assert not wide, f"lines over {WIDTH} columns: {wide}"


def check_summary(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    _fits(out)
    assert "…" not in out, out
    rows = [line for line in out.splitlines() if line.startswith("│ requests ")]  # per table
    counts = [int(cell) for row in rows for cell in re.findall(r"│\s+(\d+)\s+(?=│)", row)]
    assert sum(counts) == run.stack.recorded, out
    assert "frontier-openai" in out and "local" in out


def _dataset(out_dir: Path) -> dict[str, Any]:
    manifest: dict[str, Any] = json.loads((out_dir / "manifest.json").read_text())
    rows = {
        split: len((out_dir / f"{split}.jsonl").read_text().splitlines())
        for split in ("train", "eval")
        if (out_dir / f"{split}.jsonl").exists()
    }
    counts = manifest["counts"]
    assert rows and all(counts[split] == n for split, n in rows.items()), (counts, rows)
    return manifest


def check_export(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    out_dir = run.stack.workdir / "runs" / "sft"
    manifest = _dataset(out_dir)
    counts = manifest["counts"]
    assert counts["train"] + counts["eval"] >= len(CHAT_MODELS), counts  # each chat accepted
    assert (out_dir / "train.parquet").is_file()
    assert "manifest:" in out


def check_keys_create(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    key_id = re.search(r"^id:\s+(\S+)$", out, re.MULTILINE)
    assert key_id and re.search(r"^key: sy-\S+$", out, re.MULTILINE), out
    run.values["key_id"] = key_id.group(1)


def check_keys_list(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    names = {line.split("\t")[1] for line in out.splitlines()[1:]}
    assert {"readme", "alice"} <= names, out  # the admin API's key and the CLI's
    assert str(run.values["key_id"]) in out


def check_keys_revoke(run: Run, command: str) -> None:
    assert run.shell(command).stdout.strip() == f"revoked {run.values['key_id']}"


def check_replay(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    _fits(out)
    replayed = re.search(r"^(\d+) recorded requests replayed$", out, re.MULTILINE)
    assert replayed, out
    # Started early, it may read after a later check's requests were recorded too.
    assert run.stack.recorded <= int(replayed[1]) <= run.stack.recorded + run.sent, out
    assert re.search(r"^overall\s+\d+%", out, re.MULTILINE), out


def check_episode(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    _fits(out)
    assert f"episode {run.stack.episode_id}" in out
    assert f"steps {run.stack.episode_steps} (" in out
    header = next(line for line in out.splitlines() if "answer" in line)
    assert "tool result" in header and "…" not in header, out
    assert re.search(r"^verdict: (accepted|rejected)", out, re.MULTILINE), out


def check_episode_export(run: Run, command: str) -> None:
    out = run.shell(command).stdout
    manifest = json.loads((run.stack.workdir / "runs" / "episodes" / "manifest.json").read_text())
    assert json.loads(out.split("\nmanifest:")[0]) == manifest["counts"]


def check_fleet_status(run: Run, command: str) -> None:
    status = json.loads(run.shell(command).stdout)
    assert status["backend"] == "local" and len(status["members"]) == 1, status
    assert status["policy_version"].startswith("demo-v1"), status


def check_fleet_reload(run: Run, command: str) -> None:
    assert json.loads(run.shell(command).stdout)


def _drained(run: Run) -> bool:
    replica = str(run.values["replica_url"])
    (found,) = [r for r in run.fleet()["replicas"] if r["replica"] == replica]
    return bool(found["drained"])


def check_fleet_drain(run: Run, command: str) -> None:
    assert json.loads(run.shell(command).stdout)["drained"] is True
    assert _drained(run)


def check_fleet_undrain(run: Run, command: str) -> None:
    run.shell(command)
    assert not _drained(run)


def check_canonicalize(run: Run, command: str) -> None:
    counts = json.loads(run.shell(command).stdout)
    assert isinstance(counts, dict), counts


def check_sighup(run: Run, command: str) -> None:
    """The config's routing version changed, then the signal: the next answer carries it."""
    config = yaml.safe_load(run.stack.config_path.read_text())
    config["routing"]["version"] = "demo-v1-hup"
    changed = run.stack.config_path.with_suffix(".new")
    changed.write_text(yaml.safe_dump(config, sort_keys=False))
    changed.replace(run.stack.config_path)  # whole: a command started early may be reading it
    run.shell(command)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    auth = {"Authorization": f"Bearer {run.stack.api_key}"}
    deadline = time.monotonic() + 10
    version = ""
    while time.monotonic() < deadline and not version.startswith("demo-v1-hup"):
        answer = httpx.post(
            run.stack.gateway.base_url + "/v1/chat/completions", json=body, headers=auth
        )
        run.sent += 1
        version = answer.headers.get("x-switchyard-policy-version", "")
        time.sleep(0.1)
    assert version.startswith("demo-v1-hup"), version


def check_frontier_sim(run: Run, command: str) -> None:
    """A server: started by the command as written, asked, stopped."""
    port = int(str(run.values["free_port"]))
    argv = ["bash", "-c", f"exec {command}"]
    stack = run.stack
    server = run.servers.spawn("readme_sim", argv, port, "/health", stack.env, stack.workdir)
    try:
        run.servers.wait_ready(server, 60)
        models = httpx.get(server.base_url + "/v1/models", timeout=10)
        assert models.status_code == 200 and models.json()["data"], models.text
    finally:
        run.servers.remove(server)


CHECKS: dict[str, Callable[[Run, str], None]] = {
    "summary": check_summary,
    "export": check_export,
    "keys_create": check_keys_create,
    "keys_list": check_keys_list,
    "keys_revoke": check_keys_revoke,
    "replay": check_replay,
    "episode": check_episode,
    "episode_export": check_episode_export,
    "fleet_status": check_fleet_status,
    "fleet_reload": check_fleet_reload,
    "fleet_drain": check_fleet_drain,
    "fleet_undrain": check_fleet_undrain,
    "canonicalize": check_canonicalize,
    "sighup": check_sighup,
    "frontier_sim": check_frontier_sim,
}


@pytest.mark.slow
def test_every_run_command_works_as_written_on_a_demo_gateway(tmp_path: Path) -> None:
    entries = [e for e in load_entries() if e.check == "run"]
    failures: list[str] = []
    with ServerFleet(tmp_path / "logs") as servers:
        workdir = tmp_path / "work"
        workdir.mkdir()
        run = Run(start_demo_stack(servers, workdir), servers)
        for entry in entries:
            if entry.run in START_EARLY:
                run.start_early(substitute(entry.command, run.values))
        try:
            for entry in entries:  # README order: `keys create` gives `revoke` its id
                assert entry.run is not None
                command = substitute(entry.command, run.values)
                try:
                    CHECKS[entry.run](run, command)
                except Exception as exc:  # every failure is reported, not the first only
                    failures.append(f"{entry.command}\n  ran: {command}\n  {exc!r}")
        finally:
            run.stop_early()
    assert not failures, "\n\n".join(failures)
