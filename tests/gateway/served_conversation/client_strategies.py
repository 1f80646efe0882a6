"""Hypothesis strategies for generated client exchanges: a request body and the model's answer.

``claude_code_exchange``: Messages bodies as Claude Code builds them (system as text or blocks
with ``cache_control``, up to 22 tools and a typed one, rounds of text / thinking /
redacted_thinking / tool_use answered by tool_result blocks with ``is_error``, string or block
content and images inside results, mid-conversation system turns). ``codex_exchange``: Responses
bodies as Codex CLI builds them (instructions, leading developer items, reasoning items,
function_call / function_call_output pairs, outputs of calls that were not kept, namespaced and
built-in tools). Answers call only tools the request offers (the export refuses others, tested
apart) and carry their arguments as JSON text cut into stream fragments.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.gateway.served_conversation.client_corpus import CLAUDE_CODE_TOOLS, PNG
from tests.gateway.served_conversation.served import Answer, Call

TEXT = st.text(st.characters(codec="utf-8"), max_size=24)
ARGS = st.dictionaries(
    st.sampled_from(["file_path", "command", "pattern", "limit", "q", "note"]),
    st.one_of(TEXT, st.integers(-5, 500), st.booleans(), st.lists(TEXT, max_size=2)),
    max_size=3,
)
CC_TOOLS: dict[str, dict[str, Any]] = {str(tool["name"]): tool for tool in CLAUDE_CODE_TOOLS}
CACHED = {"type": "ephemeral"}


@st.composite
def _fragments(draw: st.DrawFn) -> tuple[str, ...]:
    """A call's arguments: JSON written compactly or with spaces, cut into stream fragments."""
    separators = draw(st.sampled_from([(",", ":"), (", ", ": ")]))
    text = json.dumps(draw(ARGS), ensure_ascii=False, separators=separators)
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=2)))
    return tuple(text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True))


@st.composite
def answers(draw: st.DrawFn, names: list[str]) -> Answer:
    calls: tuple[Call, ...] = ()
    if names:
        count = draw(st.integers(0, 2))
        calls = tuple(
            Call(f"call_answer_{i}", draw(st.sampled_from(names)), draw(_fragments()))
            for i in range(count)
        )
    text = tuple(draw(st.lists(TEXT, max_size=3)))
    return Answer(text, draw(st.none() | TEXT), calls)


@st.composite
def _text_block(draw: st.DrawFn) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": draw(TEXT)}
    if draw(st.booleans()):
        block["cache_control"] = CACHED
    return block


@st.composite
def _assistant(draw: st.DrawFn, names: list[str], turn: int) -> dict[str, Any]:
    kinds = draw(
        st.lists(
            st.sampled_from(["text", "thinking", "redacted_thinking", "tool_use"]),
            min_size=1,
            max_size=5,
        )
    )
    blocks: list[dict[str, Any]] = []
    for j, kind in enumerate(kinds):
        if kind == "text":
            blocks.append({"type": "text", "text": draw(TEXT)})
        elif kind == "thinking":
            blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": "c2ln"})
        elif kind == "redacted_thinking":
            blocks.append({"type": "redacted_thinking", "data": "ZW5j"})
        else:
            name = draw(st.sampled_from(names)) if names else "Bash"
            call = {"type": "tool_use", "id": f"toolu_{turn}_{j}", "name": name}
            blocks.append({**call, "input": draw(ARGS)})
    return {"role": "assistant", "content": blocks}


@st.composite
def _tool_result(draw: st.DrawFn, call_id: str) -> dict[str, Any]:
    content = draw(
        st.one_of(
            st.none(),
            TEXT,
            st.lists(
                st.one_of(
                    st.builds(lambda t: {"type": "text", "text": t}, TEXT),
                    st.just({"type": "image", "source": PNG}),
                ),
                max_size=3,
            ),
        )
    )
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    if content is not None:
        block["content"] = content
    error = draw(st.sampled_from([None, True, False]))
    if error is not None:
        block["is_error"] = error
    if draw(st.booleans()):
        block["cache_control"] = CACHED
    return block


@st.composite
def _user_after(draw: st.DrawFn, assistant: dict[str, Any]) -> dict[str, Any]:
    calls = [b["id"] for b in assistant["content"] if b["type"] == "tool_use"]
    blocks = [draw(_tool_result(call_id)) for call_id in calls]
    blocks += draw(st.lists(_text_block(), min_size=0 if blocks else 1, max_size=2))
    return {"role": "user", "content": blocks}


@st.composite
def claude_code_exchange(draw: st.DrawFn) -> tuple[dict[str, Any], Answer]:
    names = draw(st.lists(st.sampled_from(sorted(CC_TOOLS)), unique=True, max_size=22))
    tools: list[dict[str, Any]] = [CC_TOOLS[n] for n in names]
    if draw(st.booleans()):
        tools.append({"type": "web_search_20250305", "name": "web_search", "max_uses": 5})
    first = draw(st.one_of(TEXT, st.lists(_text_block(), min_size=1, max_size=3)))
    messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
    for turn in range(draw(st.integers(0, 3))):
        assistant = draw(_assistant(names, turn))
        messages += [assistant, draw(_user_after(assistant))]
        if draw(st.integers(0, 5)) == 0:
            messages.append({"role": "system", "content": draw(TEXT)})
            messages.append({"role": "user", "content": draw(TEXT)})
    body: dict[str, Any] = {
        "model": "m",
        "max_tokens": draw(st.integers(1, 64000)),
        "messages": messages,
        "metadata": {"user_id": "user_1_account__session_2"},
    }
    system = draw(st.one_of(st.none(), TEXT, st.lists(_text_block(), min_size=1, max_size=3)))
    if system is not None:
        body["system"] = system
    if tools:
        body["tools"] = tools
    if draw(st.booleans()):
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    return body, draw(answers(names))


FUNCTIONS = ["shell", "update_plan", "view_image", "read_file"]


def _function(name: str) -> dict[str, Any]:
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    return {"type": "function", "name": name, "description": f"{name}.", "parameters": params}


@st.composite
def _codex_tools(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[tuple[str | None, str]]]:
    """Tools, and the callable ones as (namespace, name)."""
    plain = draw(st.lists(st.sampled_from(FUNCTIONS), unique=True, max_size=4))
    tools = [_function(n) for n in plain]
    callable_: list[tuple[str | None, str]] = [(None, n) for n in plain]
    if draw(st.booleans()):
        inner = draw(st.lists(st.sampled_from(["search", "get_file"]), unique=True, min_size=1))
        tools.append(
            {"type": "namespace", "name": "github", "tools": [_function(n) for n in inner]}
        )
        callable_ += [("github", n) for n in inner]
    tools += draw(st.lists(st.sampled_from([{"type": "web_search"}, {"type": "local_shell"}])))
    return tools, callable_


def _parts(kind: str) -> st.SearchStrategy[Any]:
    part = st.builds(lambda t: {"type": kind, "text": t}, TEXT)
    return st.one_of(TEXT, st.lists(part, min_size=1, max_size=3))


@st.composite
def codex_exchange(draw: st.DrawFn) -> tuple[dict[str, Any], Answer]:
    tools, callable_ = draw(_codex_tools())
    items: list[dict[str, Any]] = [
        {"type": "message", "role": draw(st.sampled_from(["developer", "system"])), "content": c}
        for c in draw(st.lists(_parts("input_text"), max_size=2))
    ]
    items.append({"type": "message", "role": "user", "content": draw(_parts("input_text"))})
    for turn in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            items.append(
                {"type": "reasoning", "id": f"rs_{turn}", "summary": [], "encrypted_content": "x"}
            )
        if draw(st.booleans()):
            items.append(
                {"type": "message", "role": "assistant", "content": draw(_parts("output_text"))}
            )
        for k in range(draw(st.integers(0, 2)) if callable_ else 0):
            ns, name = draw(st.sampled_from(callable_))
            call_id = f"call_{turn}_{k}"
            call = {"type": "function_call", "call_id": call_id, "name": name}
            if ns is not None:
                call["namespace"] = ns
            items.append({**call, "arguments": "".join(draw(_fragments()))})
            output = draw(_parts("input_text"))
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
        if draw(st.integers(0, 4)) == 0:  # a call of a tool the door does not keep, and its output
            items.append({"type": "local_shell_call", "call_id": f"ls_{turn}", "action": {}})
            items.append({"type": "function_call_output", "call_id": f"ls_{turn}", "output": "x"})
        items.append({"type": "message", "role": "user", "content": draw(_parts("input_text"))})
    body: dict[str, Any] = {"model": "m", "input": draw(st.one_of(TEXT, st.just(items)))}
    instructions = draw(st.none() | TEXT)
    if instructions is not None:
        body["instructions"] = instructions
    if tools:
        body["tools"] = tools
    names = [f"{ns}__{n}" if ns else n for ns, n in callable_]
    return body, draw(answers(names))
