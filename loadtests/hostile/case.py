"""The shape of a hostile request, and the valid bodies the hostile ones are made from.

A :class:`HostileCase` is one request: door, method, path, the exact body bytes, the content type,
which credential to present (the runner holds the keys; ``ID_MARKER`` in a feedback body becomes
an answered ``x-request-id`` of that key) and what a correct gateway answers (``expect``).
:func:`valid_body` gives a body each door serves; :func:`dump` serialises a body, splicing raw
bytes (what a JSON value cannot carry) in at ``RAW_MARKER``; the tables at the end hold the values
hostile fields take. The families that build cases are in :mod:`loadtests.hostile.corpus` and
:mod:`loadtests.hostile.doors`.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from serving.names import LOCAL_MODEL_NAME

Door = Literal["chat", "completions", "responses", "messages", "count_tokens", "feedback", "admin"]
Credential = Literal["key", "other_key", "none", "bad_key", "admin", "bad_admin"]
Expect = Literal["2xx", "4xx", "not5xx"]
# Whose answer a feedback case names: the key's served answers, the key's refused ones (400s:
# their records exist all the same), or the other key's answers.
IdSlot = Literal["own", "own_refused", "other"]

PATHS: Final[dict[Door, str]] = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "count_tokens": "/v1/messages/count_tokens",
    "feedback": "/v1/feedback",
    "admin": "/admin/keys",
}
INFERENCE_DOORS: Final = frozenset({"chat", "completions", "responses", "messages"})
ANTHROPIC_DOORS: Final = frozenset({"messages", "count_tokens"})
ID_MARKER: Final = "@@INFERENCE_ID@@"  # replaced by an answered x-request-id when sent
RAW_MARKER: Final = "@@RAW@@"
REQUIRED: Final[dict[Door, frozenset[str]]] = {
    "chat": frozenset({"model", "messages"}),
    "completions": frozenset({"model", "prompt"}),
    "responses": frozenset({"model"}),
    "messages": frozenset({"model", "messages", "max_tokens"}),
    "count_tokens": frozenset({"model", "messages"}),
    "feedback": frozenset({"inference_id", "kind"}),
    "admin": frozenset({"name"}),
}
MB: Final = 1024 * 1024
# The gateway's default body limit per door (gateway.config.BodyLimits: at least what the
# providers behind each door accept); restated, as loadtests reaches the gateway over HTTP only.
DOOR_BODY_LIMIT: Final[dict[str, int]] = {
    "chat": 64 * MB,
    "completions": 64 * MB,
    "responses": 64 * MB,
    "messages": 32 * MB,
    "count_tokens": 32 * MB,
}


@dataclass(frozen=True, slots=True)
class Targets:
    """Model names the gateway under test serves: valid traffic picks among ``models`` and
    ``completion_models``; the landmark cases go to each of ``landmark_models`` and
    ``landmark_completion_models`` (by default a vLLM-kind target and a litellm one)."""

    models: tuple[str, ...] = ("auto", LOCAL_MODEL_NAME, "gpt-4o-mini", "claude-haiku-4-5")
    completion_models: tuple[str, ...] = ("auto", LOCAL_MODEL_NAME, "instruct")
    landmark_models: tuple[str, ...] = (LOCAL_MODEL_NAME, "gpt-4o-mini")
    landmark_completion_models: tuple[str, ...] = (LOCAL_MODEL_NAME, "instruct")


@dataclass(frozen=True, slots=True)
class HostileCase:
    """One request to send, and what a correct gateway answers."""

    index: int
    door: Door
    family: str  # "<family>.<variant>"
    method: str
    path: str
    body: bytes
    expect: Expect
    content_type: str | None = "application/json"
    credential: Credential = "key"
    id_slot: IdSlot | None = None  # ID_MARKER in the body is replaced by an id of that key
    disconnect: bool = False  # send half the body, then close: no answer is expected
    headers: tuple[tuple[str, str], ...] = field(default=())


def make_case(door: Door, family: str, body: bytes, expect: Expect, **kw: Any) -> HostileCase:
    method = kw.pop("method", "POST")
    path = kw.pop("path", PATHS[door])
    cred: Credential = "admin" if door == "admin" else "key"
    kw.setdefault("credential", cred)
    return HostileCase(-1, door, family, method, path, body, expect, **kw)


def dump(value: Any, raw: bytes | None = None) -> bytes:
    """Compact ASCII JSON; the string ``RAW_MARKER`` (quotes included) becomes ``raw``."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()
    return text if raw is None else text.replace(json.dumps(RAW_MARKER).encode(), raw, 1)


def nested(depth: int, shape: str, leaf: bytes = b'"x"') -> bytes:
    """``depth`` levels of arrays, objects or both around ``leaf``, as raw JSON."""
    if shape == "list":
        return b"[" * depth + leaf + b"]" * depth
    if shape == "dict":
        return b'{"a":' * depth + leaf + b"}" * depth
    pairs, odd = divmod(depth, 2)
    inner = b"[" + leaf + b"]" if odd else leaf
    return b'[{"a":' * pairs + inner + b"}]" * pairs


# -- valid bodies ------------------------------------------------------------------------------
PROMPTS: Final = (
    "Say hello.",
    "Write a Python function that reverses a list.",
    "Explain TCP slow start in one sentence.",
    "héllo wörld ✓ — 你好 🦀",
    "# task: none\nfix the bug",
)
SCHEMA: Final = {"type": "object", "properties": {"city": {"type": "string"}}}


def valid_body(door: Door, rng: random.Random, t: Targets) -> dict[str, Any]:
    """A body the door serves (feedback: with ``ID_MARKER`` as its inference id)."""
    model = rng.choice(t.models)
    stream = rng.random() < 0.35
    text = rng.choice(PROMPTS)
    if door == "chat":
        msgs: list[dict[str, Any]] = []
        if rng.random() < 0.3:
            msgs.append({"role": "system", "content": "You are terse."})
        msgs.append({"role": "user", "content": text})
        if rng.random() < 0.2:
            call = {"name": "get_weather", "arguments": '{"city":"Paris"}'}
            msgs.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
                }
            )
            msgs.append({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
        body: dict[str, Any] = {"model": model, "messages": msgs, "max_tokens": rng.randint(1, 16)}
        if rng.random() < 0.3:
            fn = {"name": "get_weather", "description": "Weather", "parameters": SCHEMA}
            body["tools"] = [{"type": "function", "function": fn}]
        if rng.random() < 0.3:
            body.update(temperature=round(rng.random(), 2), user="u-1", metadata={"team": "a"})
    elif door == "completions":
        prompt: Any = text if rng.random() < 0.7 else [text, "and then"]
        body = {"model": rng.choice(t.completion_models), "prompt": prompt, "max_tokens": 8}
    elif door == "responses":
        items: Any = text
        if rng.random() < 0.5:
            part = {"type": "input_text", "text": text}
            items = [{"type": "message", "role": "user", "content": [part]}]
        body = {"model": model, "input": items, "max_output_tokens": 16}
        if rng.random() < 0.3:
            body["instructions"] = "Be brief."
        if rng.random() < 0.3:
            fn_tool = {"type": "function", "name": "get_weather", "parameters": SCHEMA}
            ns = {
                "type": "namespace",
                "name": "fs",
                "tools": [{"type": "function", "name": "read", "parameters": SCHEMA}],
            }
            body["tools"] = [fn_tool, ns, {"type": "web_search"}]
    elif door in ANTHROPIC_DOORS:
        content: Any = text if rng.random() < 0.5 else [{"type": "text", "text": text}]
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        if door == "messages":
            body["max_tokens"] = rng.randint(1, 16)
        if rng.random() < 0.3:
            body["system"] = "Be brief."
        if rng.random() < 0.3:
            body["tools"] = [{"name": "get_weather", "description": "W", "input_schema": SCHEMA}]
    elif door == "feedback":
        kind = rng.choice(("accepted", "rejected", "score", "comment", "edited"))
        body = {"inference_id": ID_MARKER, "kind": kind}
        if kind == "score":
            body["value"] = rng.choice((0, 1, 0.5))
        if kind in ("comment", "edited"):
            body["payload"] = {"text": "better answer"}
    else:
        body = {"name": f"fuzz-{rng.randint(0, 999)}"}
    if stream and door in ("chat", "completions", "responses", "messages"):
        body["stream"] = True
        if door in ("chat", "completions") and rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return copy.deepcopy(body)  # shares nothing (SCHEMA, ...) with the next case's mutations


def pick_door(rng: random.Random, doors: tuple[Door, ...] | None = None) -> Door:
    pool: tuple[Door, ...] = doors or (
        "chat",
        "chat",
        "chat",
        "completions",
        "completions",
        "responses",
        "responses",
        "responses",
        "messages",
        "messages",
        "messages",
        "count_tokens",
        "feedback",
        "admin",
    )
    return rng.choice(pool)


def body_case(door: Door, family: str, body: bytes, expect: Expect, **kw: Any) -> HostileCase:
    """A case whose body keeps the feedback id marker working."""
    if door == "feedback" and ID_MARKER.encode() in body:
        kw.setdefault("id_slot", "own")
    return make_case(door, family, body, expect, **kw)


# The values hostile fields take (used by the families in loadtests.hostile.corpus).
R: Final = RAW_MARKER
# fmt: off
VALID_DOORS: Final[tuple[Door, ...]] = (
    "chat", "chat", "chat", "completions", "completions", "responses", "responses", "responses",
    "messages", "messages", "messages", "count_tokens", "feedback", "feedback", "admin",
)
ADMIN_READS: Final = (
    "/admin/backends", "/admin/routing", "/admin/keys", "/admin/traffic/summary?by=route_target",
)
JUNK: Final[tuple[Any, ...]] = (
    None, True, False, 0, -1, 1, 2**31, 2**63 - 1, -(2**63), 0.5, -1.5, 1e308, "", " ", "x", "0",
    "null", "\u0000", "\u202e\u2066rtl\u2069", "🦀🦀", "a" * 1000, "\ufeff", "\ufffe", [], {},
    [None], {"": None}, [[]], {"type": 1}, [1, "a", None], {"role": "user"},
)
# Where deep nesting goes, per door: (name, path in the valid body, value holding the marker,
# whether the nesting must be objects, as in a JSON schema).
DEEP_SPOTS: Final[dict[Door, tuple[tuple[str, tuple[Any, ...], Any, bool], ...]]] = {
    "chat": (
        ("content", ("messages", -1, "content"), R, False),
        ("content_part", ("messages", -1, "content"), [{"type": "text", "text": "hi", "x": R}],
         False),
        ("tool_parameters", ("tools",), [{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": R}}}], True),
        ("metadata", ("metadata",), {"k": R}, False),
        ("response_format", ("response_format",), {
            "type": "json_schema", "json_schema": {"name": "s", "schema": R}}, True),
        ("messages", ("messages",), R, False),
    ),
    "completions": (("prompt", ("prompt",), R, False),),
    "responses": (
        ("input", ("input",), R, False),
        ("input_item", ("input",), [{"type": "message", "role": "user", "content": "hi", "x": R}],
         False),
        ("tool_parameters", ("tools",), [{"type": "function", "name": "f", "parameters": R}], True),
        ("namespace_tools", ("tools",), [{"type": "namespace", "name": "ns", "tools": R}], False),
        ("function_call_output", ("input",), [
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": R}], False),
        ("metadata", ("metadata",), {"k": R}, False),
    ),
    "messages": (
        ("block", ("messages", 0, "content"), [{"type": "text", "text": "hi", "x": R}], False),
        ("content", ("messages", 0, "content"), R, False),
        ("input_schema", ("tools",), [{"name": "f", "input_schema": R}], True),
        ("tool_result", ("messages", 0, "content"), [
            {"type": "tool_result", "tool_use_id": "t1", "content": R}], False),
        ("system", ("system",), R, False),
        ("metadata", ("metadata",), {"k": R}, False),
    ),
    "count_tokens": (
        ("block", ("messages", 0, "content"), [{"type": "text", "text": "hi", "x": R}], False),
        ("input_schema", ("tools",), [{"name": "f", "input_schema": R}], True),
    ),
    "feedback": (("payload", ("payload",), {"text": "t", "x": R}, False),),
    "admin": (("name", ("name",), R, False),),
}
ODD_PROMPTS: Final[tuple[Any, ...]] = (
    [[]], [], [-1], [[-1]], [""], "", [[]] * 5, [2**31], [2**63], [0.5], [True], [None],
    ["a", 1], [[1], "a"], [[1, "a"]], [-(2**63)], [[2**64]], [[0] * 10_000], [1, 2, 3],
    [[1, 2], [3]], {"text": "x"},
)
# (variant, raw bytes of a JSON string, whether a correct parser refuses it)
ENCODINGS: Final[tuple[tuple[str, bytes, bool], ...]] = (
    ("raw_nul", b'"a\x00b"', True), ("escaped_nul", b'"a\\u0000b"', False),
    ("lone_high_surrogate", b'"a\\ud800b"', True), ("lone_low_surrogate", b'"\\udc80"', True),
    ("raw_surrogate_bytes", b'"\xed\xa0\x80"', True), ("invalid_utf8", b'"\xff\xfe\xfd"', True),
    ("overlong_utf8", b'"\xc0\xaf"', True), ("cut_multibyte", b'"\xe2\x82"', True),
    ("latin1", b'"caf\xe9"', True), ("paired_surrogates", b'"\\ud83e\\udd80"', False),
    ("noncharacters", b'"\\ufffe\\uffff"', False),
    ("control_chars", b'"\\u0001\\u001f\\u007f"', False),
    ("bidi", b'"\\u202e\\u2066x\\u2069"', False),
)
NON_OBJECTS: Final = (
    b"[]", b"[{}]", b'"x"', b"1", b"null", b"true", b"{}", b" ", b"[[[]]]",
    b'{"model":"auto"}{"x":1}', b'{"a":1,}', b"{'model':'auto'}", b'{"',
    b'{"model":"auto","messages":[{"role":"user","content":"x"}]} trailing',
)
CONTENT_TYPES: Final = (
    "text/plain", "application/x-www-form-urlencoded", "application/xml",
    "multipart/form-data; boundary=x", "application/json; charset=latin-1", "", None,
)
NUMERIC: Final[dict[Door, tuple[str, ...]]] = {
    "chat": ("max_tokens", "temperature", "top_p", "n", "seed", "presence_penalty", "logprobs",
             "top_logprobs", "max_completion_tokens", "frequency_penalty"),
    "completions": ("max_tokens", "n", "best_of", "logprobs", "temperature", "seed"),
    "responses": ("max_output_tokens", "temperature", "top_p", "top_logprobs", "max_tool_calls"),
    "messages": ("max_tokens", "temperature", "top_k", "top_p"),
    "count_tokens": ("max_tokens",),
    "feedback": ("value",),
    "admin": ("rpm_limit", "tpm_limit", "budget_usd"),
}
NUMBERS: Final = (
    b"-1", b"0", b"-0", b"1e-400", b"0.5", b"1.0", b"1E2", b"2147483648",
    b"9223372036854775807", b"9223372036854775808", b"-2147483649",
    b"123456789012345678901234567890", b"4.9e-324", b"1e308", b"-1e308", b"1000000000",
)
NOT_JSON_NUMBERS: Final = (b"NaN", b"Infinity", b"0x10", b"01", b"+1", b".5", b"1e400", b"-1e400")
UNKNOWN_MODELS: Final = (
    "no-such-model", " ", "auto ", "AUTO", "../../etc/passwd", "a" * 10_000, "gpt-4o-mini\u0000",
    "🦀", f"{LOCAL_MODEL_NAME}/../x", "error", "slow",
)
BAD_AUTH: Final[tuple[tuple[str, str], ...]] = (
    ("authorization", "Basic dXNlcjpwYXNz"), ("authorization", "Bearer"),
    ("authorization", "Bearer sy-" + "A" * 10_000), ("authorization", "Bearer\tsy-abc"),
    ("x-api-key", "sy-unknownunknownunknownunknownunknownunknown1"), ("api-key", "nope"),
    ("authorization", "Bearer sy-" + "B" * 43), ("authorization", "Token abc"),
)
# fmt: on
