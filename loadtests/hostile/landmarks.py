"""Landmark cases: one request for each hostile input issue 13 names, sent to each landmark
target, so that a run of any seed and size holds them (the seeded families may not draw them).

Per chat model: 20,000 messages, a 3 MB ``user``, 1,000 levels in a content part, 300 levels of
tool ``parameters``, a Responses ``namespace`` tool whose ``tools`` is a string, 1,000 levels
in Anthropic ``metadata``, an Anthropic block of an unknown type, and a body cut mid-way by a
client that goes away. Per completion model: ``prompt`` ``[[]]``, ``[]`` and ``[-1]``. Once:
100,000 levels of nesting, 1,000 levels in a feedback payload, feedback on another key's
answer, feedback without a key, feedback of a key on its own refused (400) request, and the admin
API without a token.
"""

from __future__ import annotations

from typing import Any

from loadtests.hostile.case import (
    ID_MARKER,
    MB,
    Door,
    Expect,
    HostileCase,
    R,
    Targets,
    dump,
    make_case,
    nested,
)

Landmark = tuple[Door, str, dict[str, Any], bytes | None, Expect, dict[str, Any]]


def _chat(model: str, content: Any = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 8,
            **extra}  # fmt: skip


def _per_chat_model(model: str) -> list[Landmark]:
    many = [{"role": ("user", "assistant")[i % 2], "content": f"m{i}"} for i in range(19_999)]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": R}}}]  # fmt: skip
    namespace = [{"type": "namespace", "name": "ns", "tools": "x"}]
    # fmt: off
    return [
        ("chat", "20000_messages", {**_chat(model), "messages": [
            *many, {"role": "user", "content": "last"}]}, None, "not5xx", {}),
        ("chat", "user_3mb", _chat(model, user="u" * (3 * MB)), None, "not5xx", {}),
        ("chat", "deep_part_1000", _chat(model, [{"type": "text", "text": "hi", "x": R}]),
         nested(1000, "dict"), "not5xx", {}),
        ("chat", "deep_tool_parameters_300", _chat(model, tools=tools), nested(300, "dict"),
         "not5xx", {}),
        ("responses", "namespace_tools_not_a_list", {"model": model, "input": "hi",
         "tools": namespace}, None, "not5xx", {}),
        ("messages", "deep_metadata_1000", _chat(model, metadata={"k": R}), nested(1000, "list"),
         "not5xx", {}),
        ("messages", "unknown_block", _chat(model, [{"type": "hologram"}]), None, "not5xx", {}),
        ("chat", "disconnect_mid_body", _chat(model, "hi" * 5000), None, "not5xx",
         {"disconnect": True}),
    ]
    # fmt: on


def _per_completion_model(model: str) -> list[Landmark]:
    return [
        ("completions", f"prompt_{name}", {"model": model, "prompt": prompt, "max_tokens": 8},
         None, "not5xx", {})
        for name, prompt in (("[[]]", [[]]), ("[]", []), ("[-1]", [-1]))
    ]  # fmt: skip


ONCE: list[Landmark] = [
    ("chat", "nesting_100000", {"model": "auto", "messages": R}, nested(100_000, "list"), "4xx",
     {}),
    ("feedback", "deep_payload_1000", {"inference_id": ID_MARKER, "kind": "comment",
     "payload": {"text": "t", "x": R}}, nested(1000, "dict"), "not5xx", {"id_slot": "own"}),
    ("feedback", "others_id", {"inference_id": ID_MARKER, "kind": "accepted"}, None, "4xx",
     {"id_slot": "other"}),
    ("feedback", "no_key", {"inference_id": ID_MARKER, "kind": "accepted"}, None, "4xx",
     {"id_slot": "own", "credential": "none"}),
    ("feedback", "own_refused_request", {"inference_id": ID_MARKER, "kind": "rejected"}, None,
     "2xx", {"id_slot": "own_refused"}),
    ("admin", "no_token", {"name": "x"}, None, "4xx", {"credential": "none"}),
]  # fmt: skip


def landmark_cases(targets: Targets | None = None) -> list[HostileCase]:
    """The landmark cases for ``targets`` (module docstring), in a fixed order."""
    t = targets or Targets()
    marks = [m for model in t.landmark_models for m in _per_chat_model(model)]
    marks += [m for model in t.landmark_completion_models for m in _per_completion_model(model)]
    marks += ONCE
    return [
        make_case(door, f"landmark.{name}", dump(body, raw), expect, **kw)
        for door, name, body, raw, expect, kw in marks
    ]
