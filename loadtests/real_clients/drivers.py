"""Run a real coding client once, non-interactively, in a workspace, against a gateway.

:func:`run_client` takes a :class:`ClientRun` (the installed client, the workspace, the gateway's
base URL without ``/v1``, an API key, the model name) and a prompt, and returns the client's
``(exit_code, stdout, stderr)``. Each run gets an isolated ``HOME`` (a fresh temporary directory
unless ``ClientRun.home`` names one) into which the driver writes the client's config, and an
environment built from scratch (``PATH``, ``HOME``, ``LANG``, ``TERM=dumb``, ``SHELL``, the
client's own variables): no provider key, proxy or virtualenv of the caller's leaks in. The
client runs in its own process group with stdin closed; past ``timeout_s`` the whole group is
killed and the exit code is 124 (as ``timeout(1)`` reports it).

Per client (each quirk is commented where it is handled):

============  ===============================================================================
claude-code   ``claude -p PROMPT --max-turns N --allowedTools Read Edit Write Bash``;
              ``ANTHROPIC_BASE_URL``/``ANTHROPIC_API_KEY``/``ANTHROPIC_MODEL``; Messages API
codex         ``codex exec --skip-git-repo-check --ephemeral --sandbox workspace-write -C WS
              PROMPT``; ``$CODEX_HOME/config.toml`` names a ``switchyard`` provider, Responses API
continue      ``cn -p --auto --config CONFIG PROMPT``; ``config.yaml`` names an ``openai`` model
              with ``apiBase``; chat completions
aider         ``aider --openai-api-base GW/v1 --model openai/MODEL --edit-format diff
              --yes-always ... --message PROMPT`` in a git workspace; chat completions
llm           ``llm -m switchyard --functions TOOLS --chain-limit N -s "Working directory: WS"
              PROMPT``; ``extra-openai-models.yaml`` in ``LLM_USER_PATH``; chat completions
============  ===============================================================================
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple

from loadtests.real_clients.install import InstalledClient

DEFAULT_MODEL: Final = "auto"  # the gateway's alias that lets routing decide
# Tool rounds a client may take before it must answer (claude --max-turns, llm --chain-limit);
# the multi-step task needs 4 (read, edit, run, answer), the margin absorbs a retried step.
DEFAULT_MAX_TURNS: Final = 10
# Seconds one client run may take: a cold Node start plus a few rounds through the gateway take
# well under a minute; a run still going after 5 is looping.
DEFAULT_TIMEOUT_S: Final = 300.0
TIMEOUT_EXIT_CODE: Final = 124


@dataclass(frozen=True, slots=True)
class ClientRun:
    """One run's settings; ``gateway_url`` is ``http://host:port`` without ``/v1``."""

    client: InstalledClient
    workspace: Path
    gateway_url: str
    api_key: str
    model: str = DEFAULT_MODEL
    max_turns: int = DEFAULT_MAX_TURNS
    timeout_s: float = DEFAULT_TIMEOUT_S
    home: Path | None = None  # None: a fresh temporary HOME, removed after the run


class RunResult(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str


class Invocation(NamedTuple):
    """What a client builder returns: the argv and the client's own environment variables."""

    argv: list[str]
    env: dict[str, str]


Builder = Callable[[ClientRun, Path, str], Invocation]


def _claude_code(run: ClientRun, home: Path, prompt: str) -> Invocation:
    env = {
        "ANTHROPIC_BASE_URL": run.gateway_url,  # the SDK appends /v1/messages itself
        "ANTHROPIC_API_KEY": run.api_key,
        "ANTHROPIC_MODEL": run.model,
        # Background work (titles, summaries) asks for the small model: the gateway must know it.
        "ANTHROPIC_SMALL_FAST_MODEL": run.model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": run.model,  # the newer name of the same setting
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        # Else it also sends HEAD /api/hello and other calls to Anthropic's own hosts.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    # Root may not use --dangerously-skip-permissions, and -p denies what is not allowed: name
    # the tools the tasks need. Allowing tools changes nothing in the requests (same tool list).
    argv = [str(run.client.executable), "-p", prompt, "--max-turns", str(run.max_turns)]
    return Invocation([*argv, "--allowedTools", "Read", "Edit", "Write", "Bash"], env)


CODEX_CONFIG: Final = """\
model = "{model}"
model_provider = "switchyard"

[model_providers.switchyard]
name = "Switchyard"
base_url = "{gateway}/v1"
env_key = "SWITCHYARD_API_KEY"
wire_api = "responses"

[analytics]
enabled = false
"""


def _codex(run: ClientRun, home: Path, prompt: str) -> Invocation:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    config = CODEX_CONFIG.format(model=run.model, gateway=run.gateway_url)
    (codex_home / "config.toml").write_text(config)
    env = {"CODEX_HOME": str(codex_home), "SWITCHYARD_API_KEY": run.api_key}
    # exec's approval policy is already "never"; workspace-write lets its (bundled bubblewrap)
    # sandbox write the workspace. --ephemeral: no session files; --skip-git-repo-check: the
    # workspace need not be a repository.
    argv = [
        str(run.client.executable), "exec", "--skip-git-repo-check", "--ephemeral",
        "--sandbox", "workspace-write", "--color", "never", "-C", str(run.workspace), prompt,
    ]  # fmt: skip
    return Invocation(argv, env)


CONTINUE_CONFIG: Final = """\
name: switchyard
version: 1.0.0
schema: v1
models:
  - name: switchyard-{model}
    provider: openai
    model: {model}
    apiBase: {gateway}/v1
    apiKey: {key}
    roles: [chat, edit, apply]
    capabilities: [tool_use]
"""


def _continue(run: ClientRun, home: Path, prompt: str) -> Invocation:
    continue_home = home / ".continue"
    continue_home.mkdir(parents=True, exist_ok=True)
    config = continue_home / "config.yaml"
    config.write_text(
        CONTINUE_CONFIG.format(model=run.model, gateway=run.gateway_url, key=run.api_key)
    )
    env = {
        "CONTINUE_GLOBAL_DIR": str(continue_home),
        "CONTINUE_CLI_ENABLE_TELEMETRY": "0",
        "CONTINUE_METRICS_ENABLED": "0",
    }
    # Headless cn offers no Edit/Write tool unless allowed; --auto allows every tool.
    argv = [str(run.client.executable), "-p", "--auto", "--config", str(config), prompt]
    return Invocation(argv, env)


def _aider(run: ClientRun, home: Path, prompt: str) -> Invocation:
    env = {
        # Else litellm fetches its price map from raw.githubusercontent.com at start.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        # aider commits each edit; a fresh HOME has no git identity.
        "GIT_AUTHOR_NAME": "aider",
        "GIT_AUTHOR_EMAIL": "aider@example.invalid",
        "GIT_COMMITTER_NAME": "aider",
        "GIT_COMMITTER_EMAIL": "aider@example.invalid",
    }
    argv = [
        str(run.client.executable),
        "--openai-api-base", f"{run.gateway_url}/v1",
        "--openai-api-key", run.api_key,
        "--model", f"openai/{run.model}",
        # aider's table does not know the gateway's model names and would pick the `whole`
        # format; diff (SEARCH/REPLACE) is what it uses with the frontier models behind them.
        "--edit-format", "diff",
        # Answers yes to adding files and committing; it still never runs a suggested shell
        # command (that question needs an explicit yes), so a run makes no tool rounds.
        "--yes-always",
        "--no-check-update", "--no-show-model-warnings", "--no-show-release-notes",
        "--analytics-disable", "--no-gitignore", "--no-pretty", "--no-fancy-input",
        "--message", prompt,
    ]  # fmt: skip
    return Invocation(argv, env)


LLM_MODELS: Final = """\
- model_id: switchyard
  model_name: {model}
  api_base: {gateway}/v1
  api_key_name: switchyard
  supports_tools: true
"""

# The tools a user of llm hands it for coding work (llm has none of its own): read, edit, run.
LLM_TOOLS: Final = '''\
import pathlib
import subprocess


def read_file(path: str) -> str:
    """Return the text of the file at path."""
    return pathlib.Path(path).read_text()


def edit_file(path: str, old_string: str, new_string: str) -> str:
    """Replace the first occurrence of old_string with new_string in the file at path."""
    file = pathlib.Path(path)
    text = file.read_text()
    if old_string not in text:
        return f"error: old_string not found in {path}"
    file.write_text(text.replace(old_string, new_string, 1))
    return f"edited {path}"


def run_command(command: str) -> str:
    """Run a shell command in the working directory; return its exit code and output."""
    done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return f"exit code {done.returncode}\\n{done.stdout}{done.stderr}"
'''


def _llm(run: ClientRun, home: Path, prompt: str) -> Invocation:
    user_path = home / "llm"
    user_path.mkdir(parents=True, exist_ok=True)
    (user_path / "extra-openai-models.yaml").write_text(
        LLM_MODELS.format(model=run.model, gateway=run.gateway_url)
    )
    (user_path / "keys.json").write_text(f'{{"switchyard": "{run.api_key}"}}\n')
    tools = user_path / "coding_tools.py"
    tools.write_text(LLM_TOOLS)
    argv = [
        str(run.client.executable), "-m", "switchyard", "--no-log",
        "--functions", str(tools), "--chain-limit", str(run.max_turns),
        # llm sends no system prompt of its own; agents name their working directory in one.
        "-s", f"Working directory: {run.workspace}",
        prompt,
    ]  # fmt: skip
    return Invocation(argv, {"LLM_USER_PATH": str(user_path)})


BUILDERS: Final[dict[str, Builder]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "continue": _continue,
    "aider": _aider,
    "llm": _llm,
}


def base_env(client: InstalledClient, home: Path) -> dict[str, str]:
    """The environment every client starts from: nothing of the caller's but a clean ``PATH``."""
    project_bin = str(Path(sys.prefix) / "bin")
    inherited = [p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if p]
    if sys.prefix != sys.base_prefix:  # leave the project's venv off the clients' PATH
        inherited = [p for p in inherited if p != project_bin]
    path = [*map(str, client.path_dirs), *inherited]
    env = {
        "PATH": os.pathsep.join(path),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "SHELL": "/bin/bash",  # aider and Codex name the user's shell in their prompts
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    return env


def invocation(run: ClientRun, home: Path, prompt: str) -> Invocation:
    """The argv and full environment of ``run`` for ``prompt``, its config written into ``home``."""
    try:
        builder = BUILDERS[run.client.name]
    except KeyError:
        raise KeyError(f"no driver for {run.client.name!r}; known: {', '.join(BUILDERS)}") from None
    built = builder(run, home, prompt)
    return Invocation(built.argv, {**base_env(run.client, home), **built.env})


def _kill_group(pgid: int) -> None:
    """SIGKILL the run's process group: the client and whatever it left running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def _communicate(proc: subprocess.Popen[str], timeout_s: float) -> RunResult:
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        note = f"\n[driver] killed after {timeout_s:.0f} s"
        return RunResult(TIMEOUT_EXIT_CODE, out, err + note)
    _kill_group(proc.pid)  # background helpers (sub-agents, shells) must not outlive the run
    return RunResult(proc.returncode, out, err)


def run_client(run: ClientRun, prompt: str) -> RunResult:
    """Run ``run.client`` once on ``prompt`` in ``run.workspace``; see the module docstring."""
    home = run.home or Path(tempfile.mkdtemp(prefix=f"switchyard-{run.client.name}-home-"))
    home.mkdir(parents=True, exist_ok=True)
    try:
        argv, env = invocation(run, home, prompt)
        proc = subprocess.Popen(
            argv,
            cwd=run.workspace,
            env=env,
            stdin=subprocess.DEVNULL,  # codex exec otherwise waits for more prompt on stdin
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        return _communicate(proc, run.timeout_s)
    finally:
        if run.home is None:
            shutil.rmtree(home, ignore_errors=True)
