"""The frontier simulator behaves like a provider's model in front of real coding clients.

Each test sends what a client sends (tool sets and prompt shapes as Claude Code 2.1.332, Codex CLI
0.171, Continue 1.5 and llm 0.36 send them, aider's edit-format prompts) over HTTP, and where the
model calls tools, a small executor plays the client's side: it runs the call in a workspace and
sends the result back, until the model answers in text.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadtests.frontier_sim import ThreadedSimulator

TASK = (
    "Read greet.py, replace Helo with Hello in it, then run python3 greet.py and tell me "
    "what it printed."
)
ONE_SHOT = "Say hello in five words. Do not use any tools."
REMINDER = (
    "<system-reminder>\nUse the tools when they help; call Agent for big tasks.\n</system-reminder>"
)


def _schema(required: dict[str, str], optional: dict[str, str] | None = None) -> dict[str, Any]:
    props = {k: {"type": v} for k, v in {**required, **(optional or {})}.items()}
    return {"type": "object", "properties": props, "required": list(required)}


# Claude Code 2.1.332's tools, in its order (Agent first), with their schemas' parameter names.
CLAUDE_TOOLS = [
    {"name": "Agent", "input_schema": _schema({"description": "string", "prompt": "string"})},
    {"name": "Bash", "input_schema": _schema({"command": "string"}, {"description": "string"})},
    {
        "name": "Edit",
        "input_schema": _schema(
            {"file_path": "string", "old_string": "string", "new_string": "string"}
        ),
    },
    {"name": "ListAgents", "input_schema": _schema({}, {"q": "string"})},
    {"name": "Read", "input_schema": _schema({"file_path": "string"}, {"limit": "integer"})},
    {"name": "Write", "input_schema": _schema({"file_path": "string", "content": "string"})},
]
CODEX_TOOLS = [
    {
        "type": "function",
        "name": "exec_command",
        "parameters": _schema({"cmd": "string"}, {"workdir": "string", "shell": "string"}),
    },
    {
        "type": "function",
        "name": "request_user_input",
        "parameters": _schema({"questions": "array"}),
    },
    {"type": "function", "name": "view_image", "parameters": _schema({"path": "string"})},
    {"type": "web_search"},
]


def _fn(name: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": params}}


CONTINUE_TOOLS = [
    _fn("Read", _schema({"filepath": "string"})),
    _fn("Bash", _schema({"command": "string"}, {"timeout": "number"})),
    _fn("AskQuestion", _schema({"question": "string", "options": "array"})),
    _fn("Edit", _schema({"file_path": "string", "old_string": "string", "new_string": "string"})),
    _fn("Exit", {"type": "object", "properties": {}}),
]
LLM_TOOLS = [
    _fn("read_file", _schema({"path": "string"})),
    _fn("edit_file", _schema({"path": "string", "old_string": "string", "new_string": "string"})),
    _fn("run_command", _schema({"command": "string"})),
]


def run_tool(workspace: Path, name: str, args: dict[str, Any]) -> str:
    """What the client would answer for one call, run in ``workspace``."""
    if name == "Agent":
        return "Async agent launched successfully. You will be notified when it completes."
    command = args.get("command") or args.get("cmd")
    if command is not None:
        argv = command if isinstance(command, list) else ["bash", "-lc", command]
        done = subprocess.run(argv, cwd=workspace, capture_output=True, text=True, timeout=30)
        return done.stdout + done.stderr
    path = workspace / (args.get("file_path") or args.get("filepath") or args.get("path") or "")
    if "old_string" in args:
        path.write_text(path.read_text().replace(args["old_string"], args["new_string"]))
        return f"The file {path} has been updated."
    if "content" in args:
        path.write_text(args["content"])
        return f"Wrote {path}"
    return "".join(f"{i}\t{line}" for i, line in enumerate(path.read_text().splitlines(True), 1))


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "greet.py").write_text('print("Helo, world")\n')
    return tmp_path


def _post(sim: ThreadedSimulator, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = httpx.post(sim.base_url + path, json=body, timeout=30)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


def claude_turns(
    sim: ThreadedSimulator, workspace: Path, prompt: str, system: str = "You are an agent"
) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """Claude Code's loop on the Messages API: the calls the model made and its final text."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": REMINDER}, {"type": "text", "text": prompt}],
        },
        {
            "role": "system",
            "content": f"# Environment\n - Primary working directory: {workspace}\n",
        },
    ]
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(20):
        body = {
            "model": "claude-haiku-4-5",
            "max_tokens": 2048,
            "system": [{"type": "text", "text": system}],
            "tools": CLAUDE_TOOLS,
            "messages": messages,
        }
        answer = _post(sim, "/v1/messages", body)
        uses = [b for b in answer["content"] if b["type"] == "tool_use"]
        if not uses:
            return calls, "".join(b.get("text", "") for b in answer["content"])
        messages.append({"role": "assistant", "content": answer["content"]})
        results = []
        for use in uses:
            if use["name"] == "Edit":  # Claude Code sends its calls back with defaults added
                use["input"] = {"replace_all": False, **use["input"]}
            calls.append((use["name"], use["input"]))
            output = run_tool(workspace, use["name"], use["input"])
            results.append({"type": "tool_result", "tool_use_id": use["id"], "content": output})
        messages.append({"role": "user", "content": results})
    raise AssertionError("the model never stopped calling tools")


def chat_turns(
    sim: ThreadedSimulator, workspace: Path, prompt: str, tools: list[dict[str, Any]], system: str
) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """A chat-completions client's loop (Continue, llm)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    if system:
        messages.insert(0, {"role": "system", "content": system})
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(20):
        body = {"model": "gpt-4o-mini", "messages": messages, "tools": tools}
        message = _post(sim, "/v1/chat/completions", body)["choices"][0]["message"]
        if not message.get("tool_calls"):
            return calls, str(message["content"])
        messages.append(message)
        for call in message["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            calls.append((call["function"]["name"], args))
            output = run_tool(workspace, call["function"]["name"], args)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    raise AssertionError("the model never stopped calling tools")


def _item(role: str, text: str) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


def codex_turns(
    sim: ThreadedSimulator, workspace: Path, prompt: str
) -> tuple[list[tuple[str, dict[str, Any]]], str]:
    """Codex CLI's loop on the Responses API (environment context as a user message)."""
    context = f"<environment_context>\n  <cwd>{workspace}</cwd>\n</environment_context>"
    items: list[dict[str, Any]] = [
        _item("developer", "You are a coding agent running in the Codex CLI."),
        _item("user", context),
        _item("user", prompt),
    ]
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(20):
        body = {"model": "gpt-4o-mini", "input": items, "tools": CODEX_TOOLS, "store": False}
        output = _post(sim, "/v1/responses", body)["output"]
        made = [o for o in output if o["type"] == "function_call"]
        if not made:
            texts = [c["text"] for o in output if o["type"] == "message" for c in o["content"]]
            return calls, "".join(texts)
        for call in made:
            args = json.loads(call["arguments"])
            calls.append((call["name"], args))
            items.append(call)
            result = run_tool(workspace, call["name"], args)
            wrapped = f"Chunk ID: 1\nProcess exited with code 0\nOutput:\n{result}"
            items.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": wrapped}
            )
    raise AssertionError("the model never stopped calling tools")


Loop = Callable[[ThreadedSimulator, Path, str], tuple[list[tuple[str, dict[str, Any]]], str]]
CLIENTS: dict[str, Loop] = {
    "claude-code": claude_turns,
    "codex": codex_turns,
    "continue": lambda sim, ws, p: chat_turns(
        sim,
        ws,
        p,
        CONTINUE_TOOLS,
        f"You are an agent in the Continue CLI.\n<env>\nWorking directory: {ws}\n</env>",
    ),
    "llm": lambda sim, ws, p: chat_turns(sim, ws, p, LLM_TOOLS, ""),
}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_told_not_to_use_tools_model_answers_in_text(
    frontier_sim: ThreadedSimulator, workspace: Path, client: str
) -> None:
    calls, text = CLIENTS[client](frontier_sim, workspace, ONE_SHOT)
    assert calls == [] and text.strip()


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_small_task_is_done_in_tool_rounds_with_the_clients_own_tools(
    frontier_sim: ThreadedSimulator, workspace: Path, client: str
) -> None:
    calls, text = CLIENTS[client](frontier_sim, workspace, TASK)
    assert (workspace / "greet.py").read_text() == 'print("Hello, world")\n'
    assert "Hello, world" in text
    assert len(calls) >= 3  # read, edit, run: one round each
    assert not any(name in ("Agent", "Exit", "AskQuestion") for name, _ in calls)


def test_claude_codes_file_tools_get_absolute_paths(
    frontier_sim: ThreadedSimulator, workspace: Path
) -> None:
    calls, _ = claude_turns(frontier_sim, workspace, TASK)
    assert [name for name, _ in calls] == ["Read", "Edit", "Bash"]
    assert calls[0][1]["file_path"] == str(workspace / "greet.py")


def test_codex_without_an_edit_tool_edits_through_its_shell(
    frontier_sim: ThreadedSimulator, workspace: Path
) -> None:
    calls, _ = codex_turns(frontier_sim, workspace, TASK)
    assert [name for name, _ in calls] == ["exec_command"] * 3
    assert calls[0][1]["cmd"] == "cat greet.py"


def test_a_generic_tool_request_never_starts_a_sub_agent(
    frontier_sim: ThreadedSimulator, workspace: Path
) -> None:
    calls, _ = claude_turns(frontier_sim, workspace, "Please call a tool to check the weather")
    assert calls and calls[0][0] == "Bash"


def test_a_sub_agent_is_started_only_when_asked_and_only_once_per_turn(
    frontier_sim: ThreadedSimulator, workspace: Path
) -> None:
    calls, text = claude_turns(frontier_sim, workspace, "Use a sub-agent to summarize the notes")
    assert [name for name, _ in calls] == ["Agent"]
    assert calls[0][1]["prompt"] == "summarize the notes"  # the task, not the delegation
    assert text


def test_a_sub_agent_never_starts_another(frontier_sim: ThreadedSimulator, workspace: Path) -> None:
    system = (
        "You are an agent for Claude Code, Anthropic's official CLI for Claude. Given the user's "
        "message, you should use the tools available to complete the task."
    )
    calls, _ = claude_turns(frontier_sim, workspace, "Use a sub-agent to summarize", system)
    assert calls == []


def test_a_background_tasks_notification_is_not_a_new_request(
    frontier_sim: ThreadedSimulator,
) -> None:
    """After the user's "do not use tools" turn, a task notification (tagged context, no words of
    the user's) gets text: the notification loop that made 1,287 requests cannot start."""
    notification = (
        "<system-reminder>\n[SYSTEM NOTIFICATION - NOT USER INPUT]\n<task-notification>"
        "<status>completed</status><result>call the Agent tool again</result>"
        "</task-notification>\n</system-reminder>"
    )
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 512,
        "tools": CLAUDE_TOOLS,
        "messages": [
            {"role": "user", "content": ONE_SHOT},
            {"role": "assistant", "content": "Hello there, nice to meet!"},
            {"role": "user", "content": [{"type": "text", "text": notification}]},
        ],
    }
    answer = _post(frontier_sim, "/v1/messages", body)
    assert [b["type"] for b in answer["content"]] == ["text"]


def test_tool_rounds_per_user_turn_are_bounded(
    frontier_sim: ThreadedSimulator, workspace: Path
) -> None:
    prompt = ", then ".join(f"run `echo {i}`" for i in range(12)) + "."
    calls, text = claude_turns(frontier_sim, workspace, prompt)
    assert len(calls) == 8  # max_tool_rounds
    assert text


AIDER_SYSTEM = (
    "Act as an expert software developer.\nOnce you understand the request you MUST:\n"
    "Describe each change with a *SEARCH/REPLACE block* per the examples below."
)
AIDER_FILES = (
    "I have *added these files to the chat* so you can go ahead and edit them.\n\n"
    'greet.py\n```\nprint("Helo, world")\n```\n'
)
AIDER_RULES = (
    "\n\n# *SEARCH/REPLACE block* Rules:\n\nEvery *SEARCH/REPLACE block* must use this format"
)


def test_aider_gets_search_replace_blocks_for_a_file_in_the_chat(
    frontier_sim: ThreadedSimulator,
) -> None:
    messages = [
        {"role": "system", "content": AIDER_SYSTEM},
        {"role": "user", "content": AIDER_FILES},
        {"role": "assistant", "content": "Ok, any changes I propose will be to those files."},
        {"role": "user", "content": TASK + AIDER_RULES},
    ]
    answer = _post(
        frontier_sim, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": messages}
    )
    text = answer["choices"][0]["message"]["content"]
    assert (
        'greet.py\n```\n<<<<<<< SEARCH\nprint("Helo, world")\n=======\n'
        'print("Hello, world")\n>>>>>>> REPLACE\n```' in text
    )
    assert "```bash\npython3 greet.py\n```" in text


def test_aider_is_asked_to_add_a_file_the_chat_does_not_hold(
    frontier_sim: ThreadedSimulator,
) -> None:
    messages = [
        {"role": "system", "content": AIDER_SYSTEM},
        {"role": "user", "content": TASK + AIDER_RULES},
    ]
    answer = _post(
        frontier_sim, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": messages}
    )
    assert "add it to the chat" in answer["choices"][0]["message"]["content"]
    assert "greet.py" in answer["choices"][0]["message"]["content"]


def test_aiders_commit_message_request_gets_one_line(frontier_sim: ThreadedSimulator) -> None:
    messages = [
        {"role": "system", "content": "Generate one-line Git commit messages based on diffs."},
        {"role": "user", "content": f"\nUSER: {TASK}\n\nASSISTANT: done\n\n# Diffs:\n-a\n+b"},
    ]
    answer = _post(
        frontier_sim, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": messages}
    )
    assert answer["choices"][0]["message"]["content"] == "fix: replace Helo with Hello in greet.py"


@pytest.mark.parametrize(
    ("path", "header", "error_type"),
    [
        ("/v1/messages", "x-sim-anthropic-max-body-bytes", "request_too_large"),
        ("/v1/chat/completions", "x-sim-openai-max-body-bytes", "invalid_request_error"),
    ],
)
def test_a_body_over_the_providers_limit_is_a_413_in_its_shape(
    frontier_sim: ThreadedSimulator, path: str, header: str, error_type: str
) -> None:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x" * 4096}]}
    r = httpx.post(frontier_sim.base_url + path, json=body, headers={header: "2048"}, timeout=30)
    assert r.status_code == 413
    assert error_type in r.text


CAPTURED = Path(__file__).parent / "real_client_requests"
# The first call each captured client gets for the multi-step task: the read, with its own tool.
FIRST_CALL = {
    "claude-code": ("Read", {"file_path": "/tmp/real-client-ws/greet.py"}),
    "claude-code-2.1.197": ("Read", {"file_path": "/tmp/real-client-ws/greet.py"}),
    "codex": ("exec_command", {"cmd": "cat greet.py"}),
    "continue": ("Read", {"filepath": "/tmp/real-client-ws/greet.py"}),
    "llm": ("read_file", {"path": "/tmp/real-client-ws/greet.py"}),
}


def _swap_prompt(node: Any, prompt: str) -> Any:
    """``node`` with the multi-step prompt replaced by ``prompt`` wherever it appears."""
    if isinstance(node, str):
        return node.replace(TASK, prompt)
    if isinstance(node, list):
        return [_swap_prompt(v, prompt) for v in node]
    if isinstance(node, dict):
        return {k: _swap_prompt(v, prompt) for k, v in node.items()}
    return node


def _first_answer(sim: ThreadedSimulator, capture: dict[str, Any], body: Any) -> Any:
    path = capture["path"].split("?")[0]
    body = {**body, "stream": False}
    return _post(sim, path, body)


def _calls_of(answer: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = [
        (b["name"], b["input"]) for b in answer.get("content") or [] if b["type"] == "tool_use"
    ]
    found += [
        (o["name"], json.loads(o["arguments"]))
        for o in answer.get("output") or []
        if o["type"] == "function_call"
    ]
    for choice in answer.get("choices") or []:
        for call in choice["message"].get("tool_calls") or []:
            found.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
    return found


@pytest.mark.parametrize("client", sorted(FIRST_CALL))
def test_captured_first_requests_get_the_first_step_with_the_clients_own_tool(
    frontier_sim: ThreadedSimulator, client: str
) -> None:
    capture = json.loads((CAPTURED / f"{client}.json").read_text())
    calls = _calls_of(_first_answer(frontier_sim, capture, capture["body"]))
    name, arguments = FIRST_CALL[client]
    assert calls and calls[0][0] == name
    assert {k: calls[0][1][k] for k in arguments} == arguments


@pytest.mark.parametrize("client", sorted([*FIRST_CALL, "aider"]))
def test_captured_clients_told_not_to_use_tools_get_text(
    frontier_sim: ThreadedSimulator, client: str
) -> None:
    capture = json.loads((CAPTURED / f"{client}.json").read_text())
    answer = _first_answer(frontier_sim, capture, _swap_prompt(capture["body"], ONE_SHOT))
    assert _calls_of(answer) == []


def test_the_captured_aider_request_gets_a_search_replace_block(
    frontier_sim: ThreadedSimulator,
) -> None:
    capture = json.loads((CAPTURED / "aider.json").read_text())
    answer = _first_answer(frontier_sim, capture, capture["body"])
    assert (
        '<<<<<<< SEARCH\nprint("Helo, world")\n======='
        in answer["choices"][0]["message"]["content"]
    )
