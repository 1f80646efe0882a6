"""The one check of a tool call (``traffic.tool_calls``): an offered tool, a JSON object, the
tool's schema; tools read in either shape a caller holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from traffic.tool_calls import CallCheck, check_calls, first_problem, offered_functions

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "read_file", "parameters": SCHEMA}},
    {"type": "function", "name": "write_file", "parameters": SCHEMA},  # flat (Responses) shape
    {"type": "function", "function": {"name": "free"}},
    {"type": "web_search"},
    {"type": "function", "function": "junk"},
    {"type": "function", "function": {"name": ""}},
    {"type": "function", "function": {"name": 3}},
    "junk",
]


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str


def _c(name: str, arguments: str, call_id: str = "c") -> Call:
    return Call(call_id, name, arguments)


def test_the_offered_functions_are_read_from_either_shape_and_junk_is_left_out() -> None:
    names = [t["function"]["name"] for t in offered_functions(TOOLS)]
    assert names == ["read_file", "write_file", "free"]
    assert offered_functions(tuple(TOOLS)) == offered_functions(TOOLS)
    assert offered_functions(offered_functions(TOOLS)) == offered_functions(TOOLS)
    assert offered_functions("not a list") == offered_functions(None) == []


def test_each_call_is_checked_in_order_with_its_problem_and_kind() -> None:
    calls = [
        _c("read_file", '{"path": "a"}', "1"),
        _c("write_file", '{"file": "a"}', "2"),  # the flat tool's schema is enforced
        _c("open_file", "{}", "3"),
        _c("read_file", '{"path": ', "4"),
        _c("free", "[1]", "5"),
        _c("free", "", "6"),  # empty arguments are {}
    ]
    checks = check_calls(calls, TOOLS)
    assert [c.id for c in checks] == ["1", "2", "3", "4", "5", "6"]
    assert [c.kind for c in checks] == [
        None,
        "schema",
        "unknown_tool",
        "malformed_arguments",
        "malformed_arguments",
        None,
    ]
    assert checks[1].problem is not None and checks[1].problem.startswith("schema: ")
    assert [c.valid for c in checks] == [c.problem is None for c in checks]
    assert check_calls([_c("", "{}")], TOOLS)[0].kind == "unknown_tool"  # no unnamed tool


def test_the_first_problem_of_several_calls() -> None:
    good, bad = _c("read_file", '{"path": "a"}', "g"), _c("read_file", "{}", "b")
    assert first_problem([good, good], TOOLS) is None
    assert first_problem([], None) is None
    check = first_problem([good, bad, _c("nope", "{}")], TOOLS)
    assert isinstance(check, CallCheck) and check.id == "b" and check.kind == "schema"
    unknown = CallCheck("g", "read_file", good.arguments, "unknown_tool")
    assert first_problem([good], "not a list") == unknown
