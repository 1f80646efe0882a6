"""Hostile requests for every door: a seeded, deterministic corpus of malformed and adversarial
bodies, with valid requests interleaved.

    case = build_case(seed=1, index=17)        # depends only on (seed, index, targets)
    cases = hostile_corpus(seed=1, count=3000) # lazily, case by case

How a case is made: ``random.Random`` seeded with ``(seed, index)`` picks a family by weight
(:data:`FAMILY_WEIGHTS`) and the family builds the request: the door, method and path, the exact
body bytes, the content type, which credential to present (the runner holds the keys) and what a
correct gateway answers (``expect``): ``2xx``, ``4xx``, or ``not5xx`` where an answer and a
refusal are both right. Bodies are JSON values serialised with ASCII escapes; what a JSON value
cannot carry (nesting past Python's recursion limit, numbers out of range, invalid UTF-8, a cut)
is spliced in as raw bytes at a marker string.

Families: ``valid`` (served traffic, to show the breaker never opens for it), ``wrong_type``
(any field, at any depth, given a value of another JSON type), ``missing_field``,
``deep_nesting`` (10 to 100,000 levels in messages, content parts, tool schemas, metadata,
feedback payloads, admin bodies), ``huge_string`` (3 MB fields, 9 MB bodies), ``many_items``
(20,000 messages, input items or stop sequences; 2,000 tools), ``odd_prompt`` (completions
``[[]]``, ``[]``, ``[-1]`` ...), ``bad_encoding`` (NUL, lone surrogates, invalid UTF-8, BOM,
UTF-16), ``non_object_json``, ``truncated_json``, ``content_type``, ``numbers`` (negative,
huge, out of range), ``unknown_model``, ``auth`` (no key, bad keys), ``door_quirks`` (per door:
Responses ``namespace`` tools with non-list ``tools``, Anthropic blocks of unknown types, tool
names, stateful fields ...), ``feedback`` (others' ids, unknown ids, no key ...), ``admin`` (no
token, bad token, bad bodies), ``disconnect`` (half a body, then the connection closes) and
``empty_body``. :func:`hostile_corpus` also places the landmark cases
(:mod:`loadtests.hostile.landmarks`: one per input issue 13 names) at evenly spaced indices.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any, Final

from loadtests.hostile.case import (
    ADMIN_READS,
    ANTHROPIC_DOORS,
    BAD_AUTH,
    CONTENT_TYPES,
    DEEP_SPOTS,
    DOOR_BODY_LIMIT,
    ENCODINGS,
    ID_MARKER,
    INFERENCE_DOORS,
    JUNK,
    MB,
    NON_OBJECTS,
    NOT_JSON_NUMBERS,
    NUMBERS,
    NUMERIC,
    ODD_PROMPTS,
    PATHS,
    REQUIRED,
    SCHEMA,
    UNKNOWN_MODELS,
    VALID_DOORS,
    Credential,
    Door,
    Expect,
    HostileCase,
    R,
    Targets,
    body_case,
    dump,
    make_case,
    nested,
    pick_door,
    valid_body,
)
from loadtests.hostile.doors import fam_admin, fam_door_quirks, fam_feedback
from loadtests.hostile.landmarks import landmark_cases

__all__ = [
    "ID_MARKER",
    "INFERENCE_DOORS",
    "PATHS",
    "HostileCase",
    "Targets",
    "build_case",
    "hostile_corpus",
    "landmark_cases",
]

DEPTHS: Final = (10, 100, 500, 999, 1000, 1023, 1024, 1025, 5000, 100_000)
JSON_DEPTH_LIMIT: Final = 1024  # deeper is not JSON a gateway should parse: expect a 4xx
STRING_FIELDS: Final = frozenset({"model", "inference_id", "kind", "name"})
TOKEN_CAPS: Final = frozenset({"max_tokens", "max_output_tokens", "max_completion_tokens"})


def _jtype(value: Any) -> str:
    return repr(value) if isinstance(value, bool) or value is None else type(value).__name__


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    items: Any = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in items:
        yield (*prefix, key)
        if isinstance(child, dict | list):
            yield from _paths(child, (*prefix, key))


def _parent(body: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        body = body[key]
    return body


def fam_valid(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng, VALID_DOORS)
    if door == "admin":
        path = rng.choice(ADMIN_READS)
        return make_case(door, "valid.admin_get", b"", "2xx", method="GET", path=path,
                         content_type=None)  # fmt: skip
    cred: Credential = "other_key" if door in INFERENCE_DOORS and rng.random() < 0.25 else "key"
    return body_case(door, f"valid.{door}", dump(valid_body(door, rng, t)), "2xx", credential=cred)


def fam_wrong_type(rng: random.Random, t: Targets) -> HostileCase:
    """Any field at any depth gets a value of another JSON type."""
    door = pick_door(rng)
    body = valid_body(door, rng, t)
    path = rng.choice(list(_paths(body)))
    old = _parent(body, path)[path[-1]]
    choices = [j for j in JUNK if _jtype(j) != _jtype(old)]
    if path[-1] in TOKEN_CAPS:  # a null cap asks for an answer of any length: slow, not hostile
        choices = [j for j in choices if j is not None]
    _parent(body, path)[path[-1]] = copy.deepcopy(rng.choice(choices))
    # Only a field that takes strings alone is refused whatever the other type: a list given
    # to `prompt`, or `True` to `max_tokens`, may be a valid value.
    required = len(path) == 1 and path[0] in STRING_FIELDS
    where = ".".join(map(str, path))
    return body_case(door, f"wrong_type.{where}", dump(body), "4xx" if required else "not5xx")


def fam_missing_field(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng)
    body = valid_body(door, rng, t)
    inner = [p for p in _paths(body) if len(p) > 1]
    if rng.random() < 0.6 or not inner:
        name = rng.choice(sorted(REQUIRED[door]))
        body.pop(name, None)
        return body_case(door, f"missing_field.{name}", dump(body), "4xx")
    path = rng.choice(inner)
    _parent(body, path).pop(path[-1])
    return body_case(door, f"missing_field.{'.'.join(map(str, path))}", dump(body), "not5xx")


def fam_deep_nesting(rng: random.Random, t: Targets) -> HostileCase:
    """10 to 100,000 levels of arrays and/or objects where a door takes nested JSON."""
    door = pick_door(rng)
    body = valid_body(door, rng, t)
    name, path, value, objects = rng.choice(DEEP_SPOTS[door])
    if door == "feedback":
        body["kind"] = "comment"
    if rng.random() < 0.2 and door not in ("feedback", "admin"):
        name, path, value, objects = "extra_field", ("x_extra",), R, False
    _parent(body, path)[path[-1]] = copy.deepcopy(value)
    depth = rng.choice(DEPTHS)
    shape = "dict" if objects else rng.choice(("list", "dict", "mixed"))
    expect: Expect = "4xx" if depth > JSON_DEPTH_LIMIT else "not5xx"
    family = f"deep_nesting.{name}.{shape}.{depth}"
    return body_case(door, family, dump(body, nested(depth, shape)), expect)


def fam_huge_string(rng: random.Random, t: Targets) -> HostileCase:
    """3 MB fields (under the body limit) and bodies 1 MiB over their door's limit."""
    door = pick_door(rng, ("chat", "chat", "completions", "responses", "messages", "feedback"))
    body = valid_body(door, rng, t)
    if door == "feedback":
        size = rng.choice((900 * 1024, 2 * MB))
        body.update(kind="comment", payload={"text": "y" * size})
        expect: Expect = "not5xx" if size < MB else "4xx"
        return body_case(door, f"huge_string.payload_{size // 1024}kb", dump(body), expect)
    variant = rng.choice(("user_3mb", "content_3mb", "body_over_limit"))
    over = DOOR_BODY_LIMIT[door] + MB
    blob = rng.choice("abcxyz") * (over if variant == "body_over_limit" else 3 * MB)
    if variant == "user_3mb":
        if door in ANTHROPIC_DOORS:
            body["metadata"] = {"user_id": blob}
        else:
            body["user"] = blob
    elif door == "chat":
        body["messages"][-1]["content"] = blob
    elif door == "completions":
        body["prompt"] = blob
    elif door == "responses":
        body["input"] = blob
    else:
        body["messages"][0]["content"] = blob
    expect = "4xx" if variant == "body_over_limit" else "not5xx"
    return body_case(door, f"huge_string.{variant}", dump(body), expect)


def fam_many_items(rng: random.Random, t: Targets) -> HostileCase:
    """20,000 (or 2,000) messages, input items or stop sequences; 2,000 tools."""
    door = pick_door(rng, ("chat", "chat", "responses", "messages", "count_tokens"))
    body = valid_body(door, rng, t)
    count = rng.choice((2_000, 20_000, 20_000))
    what = rng.choice(("messages", "messages", "messages", "stop", "tools"))
    if what == "messages":
        roles = ("user", "assistant")
        msgs = [{"role": roles[i % 2], "content": f"m{i}"} for i in range(count - 1)]
        body["input" if door == "responses" else "messages"] = [
            *msgs,
            {"role": "user", "content": "last"},
        ]
    elif what == "stop":
        key = "stop_sequences" if door in ANTHROPIC_DOORS else "stop"
        body[key] = [f"s{i}" for i in range(count)]
    else:
        count = 2_000
        if door in ANTHROPIC_DOORS:
            body["tools"] = [{"name": f"t{i}", "input_schema": SCHEMA} for i in range(count)]
        elif door == "responses":
            body["tools"] = [{"type": "function", "name": f"t{i}"} for i in range(count)]
        else:
            body["tools"] = [
                {"type": "function", "function": {"name": f"t{i}"}} for i in range(count)
            ]
    return body_case(door, f"many_items.{what}.{count}", dump(body), "not5xx")


def fam_odd_prompt(rng: random.Random, t: Targets) -> HostileCase:
    body = valid_body("completions", rng, t)
    body["prompt"] = rng.choice(ODD_PROMPTS)
    label = json.dumps(body["prompt"])[:24]
    return body_case("completions", f"odd_prompt.{label}", dump(body), "not5xx")


def fam_bad_encoding(rng: random.Random, t: Targets) -> HostileCase:
    """NUL, lone surrogates, invalid UTF-8 in a string; a BOM or UTF-16 for the whole body."""
    door = pick_door(rng)
    body = valid_body(door, rng, t)
    if rng.random() < 0.15:
        text = dump(body)
        kind = rng.choice(("bom", "utf16"))
        data = b"\xef\xbb\xbf" + text if kind == "bom" else text.decode().encode("utf-16")
        return body_case(door, f"bad_encoding.{kind}", data, "4xx")
    variant, raw, refused = rng.choice(ENCODINGS)
    if door == "feedback":
        body.update(kind="comment", payload={"text": R})
    else:
        body["name" if door == "admin" else "x_text"] = R
    expect: Expect = "4xx" if refused else "not5xx"
    return body_case(door, f"bad_encoding.{variant}", dump(body, raw), expect)


def fam_non_object_json(rng: random.Random, t: Targets) -> HostileCase:
    raw = rng.choice(NON_OBJECTS)
    return make_case(pick_door(rng), f"non_object_json.{raw[:12]!r}", raw, "4xx")


def fam_truncated_json(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng)
    text = dump(valid_body(door, rng, t))
    return make_case(door, "truncated_json", text[: rng.randint(1, len(text) - 1)], "4xx")


def fam_content_type(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng)
    if rng.random() < 0.4:
        form = b"model=auto&messages=hi&max_tokens=8"
        ctype = "application/x-www-form-urlencoded"
        return make_case(door, "content_type.form_body", form, "4xx", content_type=ctype)
    odd = rng.choice(CONTENT_TYPES)
    body = dump(valid_body(door, rng, t))
    return body_case(door, f"content_type.{odd}", body, "not5xx", content_type=odd)


def fam_numbers(rng: random.Random, t: Targets) -> HostileCase:
    """Negative, huge, out-of-range and not-JSON numbers in every numeric field."""
    door = pick_door(rng)
    body = valid_body(door, rng, t)
    name = rng.choice(NUMERIC[door])
    not_json = rng.random() < 0.25
    raw = rng.choice(NOT_JSON_NUMBERS if not_json else NUMBERS)
    body[name] = R
    if door == "feedback":
        body["kind"] = "score"
    expect: Expect = "4xx" if not_json else "not5xx"
    return body_case(door, f"numbers.{name}={raw.decode()}", dump(body, raw), expect)


def fam_unknown_model(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng, ("chat", "completions", "responses", "messages", "count_tokens"))
    body = valid_body(door, rng, t)
    body["model"] = rng.choice(UNKNOWN_MODELS)
    return body_case(door, f"unknown_model.{body['model'][:16]!r}", dump(body), "4xx")


def fam_auth(rng: random.Random, t: Targets) -> HostileCase:
    doors: tuple[Door, ...] = (
        "chat",
        "completions",
        "responses",
        "messages",
        "count_tokens",
        "feedback",
    )
    door = pick_door(rng, doors)
    body = dump(valid_body(door, rng, t))
    mode = rng.choice(("none", "bad_key", "header"))
    if mode == "header":
        name, value = rng.choice(BAD_AUTH)
        family = f"auth.{name}:{value[:14]}"
        return body_case(door, family, body, "4xx", credential="none", headers=((name, value),))
    return body_case(door, f"auth.{mode}", body, "4xx", credential=mode)


def fam_disconnect(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng, ("chat", "completions", "responses", "messages"))
    body = dump(valid_body(door, rng, t))
    return make_case(door, "disconnect.mid_body", body, "not5xx", disconnect=True)


def fam_empty_body(rng: random.Random, t: Targets) -> HostileCase:
    return make_case(pick_door(rng), "empty_body", b"", "4xx")


Family = Callable[[random.Random, Targets], HostileCase]
# fmt: off
FAMILY_WEIGHTS: Final[tuple[tuple[Family, float], ...]] = (
    (fam_valid, 22), (fam_wrong_type, 14), (fam_missing_field, 5), (fam_deep_nesting, 9),
    (fam_huge_string, 1.5), (fam_many_items, 0.6), (fam_odd_prompt, 3), (fam_bad_encoding, 5),
    (fam_non_object_json, 3), (fam_truncated_json, 4), (fam_content_type, 3), (fam_numbers, 6),
    (fam_unknown_model, 3), (fam_auth, 4), (fam_door_quirks, 9), (fam_feedback, 4.5),
    (fam_admin, 3.5), (fam_disconnect, 1), (fam_empty_body, 1),
)
# fmt: on


def build_case(seed: int, index: int, targets: Targets | None = None) -> HostileCase:
    """Case ``index`` of the corpus of ``seed``: the same bytes on every run and machine."""
    rng = random.Random(f"switchyard-hostile:{seed}:{index}")
    family: Family = rng.choices([f for f, _ in FAMILY_WEIGHTS], [w for _, w in FAMILY_WEIGHTS])[0]
    return replace(family(rng, targets or Targets()), index=index)


def hostile_corpus(
    seed: int, count: int, targets: Targets | None = None, *, landmarks: bool = True
) -> Iterator[HostileCase]:
    """Cases ``0 .. count-1`` of the corpus of ``seed``, built one at a time (some are MBs);
    with ``landmarks``, the :func:`landmark_cases` take evenly spaced places among them."""
    marks = landmark_cases(targets) if landmarks else []
    if count < 4 * len(marks):
        marks = []
    step = count // len(marks) if marks else 0
    for index in range(count):
        slot, offset = divmod(index, step) if step else (0, -1)
        if marks and offset == step // 2 and slot < len(marks):
            yield replace(marks[slot], index=index)
        else:
            yield build_case(seed, index, targets)
