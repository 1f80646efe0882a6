"""Door-specific hostile families: quirks of each wire format, feedback and the admin API.

Each family takes the case's seeded ``random.Random`` and the :class:`Targets` and returns one
:class:`HostileCase`; :mod:`loadtests.hostile.corpus` weighs them with the generic families. A
quirk is data: ``(variant, expected answer, where, value)``, where ``where`` is a top-level field
to set, ``"+messages"`` to append a message, ``"content"`` to replace the user's content, or
``"-input"`` to drop ``input``.
"""

from __future__ import annotations

import copy
import random
from typing import Any, Final

from loadtests.hostile.case import (
    ANTHROPIC_DOORS,
    PATHS,
    SCHEMA,
    Credential,
    Door,
    Expect,
    HostileCase,
    IdSlot,
    Targets,
    body_case,
    dump,
    make_case,
    pick_door,
    valid_body,
)

Quirk = tuple[str, Expect, str, Any]


def _fn(**fn: Any) -> list[dict[str, Any]]:
    return [{"type": "function", "function": fn}]


def _ns(tools: Any) -> list[dict[str, Any]]:
    return [{"type": "namespace", "name": "ns", "tools": tools}]


# fmt: off
QUIRKS: Final[dict[Door, tuple[Quirk, ...]]] = {
    "chat": (
        ("tool_name_65", "4xx", "tools", _fn(name="f" * 65)),
        ("tool_name_empty", "4xx", "tools", _fn(name="")),
        ("tool_not_object", "4xx", "tools", [1]),
        ("tool_type_unknown", "not5xx", "tools", [{"type": "retrieval"}]),
        ("tool_params_string", "not5xx", "tools", _fn(name="f", parameters="x")),
        ("tool_call_id_int", "4xx", "+messages", {"role": "assistant", "tool_calls": [
            {"id": 5, "function": {"name": "f", "arguments": "{}"}}]}),
        ("tool_call_args_bad_json", "not5xx", "+messages", {"role": "assistant", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{{{"}}]}),
        ("tool_msg_no_id", "not5xx", "+messages", {"role": "tool", "content": "x"}),
        ("stop_5", "4xx", "stop", ["a", "b", "c", "d", "e"]),
        ("stream_options_no_stream", "4xx", "stream_options", {"include_usage": True}),
        ("role_unknown", "4xx", "+messages", {"role": "wizard", "content": "x"}),
        ("part_unknown", "not5xx", "content", [{"type": "video", "video": "x"}]),
        ("part_no_type", "4xx", "content", [{"text": "x"}]),
        ("image_bad_data", "not5xx", "content", [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!"}}]),
        ("logit_bias_odd", "not5xx", "logit_bias", {"abc": 1e9}),
        ("n_128", "not5xx", "n", 128),
        ("tool_choice_odd", "not5xx", "tool_choice", {"type": "teleport"}),
        ("response_format_odd", "not5xx", "response_format", {"type": 5}),
    ),
    "completions": (
        ("suffix_chat_model", "not5xx", "suffix", "}"),
        ("best_of_1000", "not5xx", "best_of", 1000),
        ("echo_logprobs", "not5xx", "echo", True),
        ("stop_5", "not5xx", "stop", ["a", "b", "c", "d", "e"]),
    ),
    "responses": (
        ("namespace_tools_str", "not5xx", "tools", _ns("x")),
        ("namespace_tools_int", "not5xx", "tools", _ns(5)),
        ("namespace_tools_obj", "not5xx", "tools", _ns({"a": 1})),
        ("namespace_tools_scalars", "not5xx", "tools", _ns([1, "x", None])),
        ("namespace_tools_no_name", "not5xx", "tools", _ns([{"type": "function"}])),
        ("namespace_name_int", "not5xx", "tools", [{"type": "namespace", "name": 5, "tools": []}]),
        ("function_tool_no_name", "4xx", "tools", [{"type": "function"}]),
        ("tools_not_list", "4xx", "tools", "x"),
        ("tool_not_object", "4xx", "tools", [1]),
        ("item_int", "4xx", "input", [1]),
        ("item_unknown", "not5xx", "input", [{"type": "hologram"}]),
        ("function_call_args_int", "not5xx", "input", [
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": 5}]),
        ("function_call_no_name", "not5xx", "input", [{"type": "function_call", "call_id": "c"}]),
        ("output_orphan", "not5xx", "input", [
            {"type": "function_call_output", "call_id": "zz", "output": [1, {"x": 2}]}]),
        ("role_unknown", "not5xx", "input", [{"role": "wizard", "content": "x"}]),
        ("content_int", "not5xx", "input", [{"role": "user", "content": 5}]),
        ("parts_odd", "not5xx", "input", [{"role": "user", "content": [
            1, {"type": "input_image", "image_url": 5}, {"type": "input_text"}]}]),
        ("previous_response_id", "4xx", "previous_response_id", "resp_1"),
        ("conversation", "4xx", "conversation", "conv_1"),
        ("background", "4xx", "background", True),
        ("reasoning_odd", "not5xx", "reasoning", {"effort": 5}),
        ("text_format_odd", "not5xx", "text", {"format": "x"}),
        ("tool_choice_odd", "not5xx", "tool_choice", {"type": "function"}),
        ("allowed_tools_odd", "not5xx", "tool_choice",
         {"type": "allowed_tools", "mode": 5, "tools": 3}),
        ("instructions_list", "4xx", "instructions", ["x"]),
        ("no_input", "4xx", "-input", None),
    ),
    "messages": (
        ("block_unknown", "not5xx", "content", [{"type": "hologram", "x": 1}]),
        ("block_scalars", "not5xx", "content", [1, "x", None]),
        ("block_empty", "not5xx", "content", [{}]),
        ("text_no_text", "not5xx", "content", [{"type": "text"}]),
        ("text_int", "not5xx", "content", [{"type": "text", "text": 5}]),
        ("image_bad", "not5xx", "content", [
            {"type": "image", "source": {"type": "base64", "data": 5}}]),
        ("tool_result_no_id", "4xx", "content", [{"type": "tool_result", "content": "x"}]),
        ("tool_result_odd", "not5xx", "content", [
            {"type": "tool_result", "tool_use_id": "t", "content": [1, {"type": "image"}]}]),
        ("tool_use_in_user", "not5xx", "content", [{"type": "tool_use", "id": "t", "input": "x"}]),
        ("assistant_odd", "not5xx", "+messages", {"role": "assistant", "content": [
            {"type": "tool_use", "id": 5, "name": 6, "input": "x"}, {"type": "thinking"}, 1]}),
        ("document", "not5xx", "content", [{"type": "document", "source": {"type": "text"}}]),
        ("typed_tool", "not5xx", "tools", [{"type": "bash_20250124", "name": "bash"}]),
        ("tool_no_schema", "not5xx", "tools", [{"name": "f"}]),
        ("tool_scalar", "not5xx", "tools", [1]),
        ("tool_choice_odd", "not5xx", "tool_choice", {"type": "teleport"}),
        ("tool_choice_no_name", "not5xx", "tool_choice", {"type": "tool"}),
        ("system_odd", "not5xx", "system", [1, {"type": "text"}]),
        ("role_tool", "4xx", "+messages", {"role": "tool", "content": "x"}),
        ("messages_empty", "not5xx", "messages", []),
        ("thinking_odd", "not5xx", "thinking", {"type": "enabled", "budget_tokens": -1}),
        ("temperature_1_5", "4xx", "temperature", 1.5),
        ("metadata_odd", "not5xx", "metadata", {"user_id": 5}),
    ),
}
FEEDBACK_IDS: Final[tuple[tuple[str, Any], ...]] = (
    ("unknown_uuid", "01890a5d-ac96-7c3d-8000-000000000000"), ("empty", ""), ("word", "x"),
    ("sql", "' OR 1=1 --"), ("long", "a" * 100_000), ("int", 5), ("null", None),
    ("list", ["x"]), ("uuid_upper", "01890A5D-AC96-7C3D-8000-000000000001"),
    ("resp_prefixed", "resp_01890a5dac967c3d8000000000000002"),
)
FEEDBACK_BAD: Final[tuple[tuple[str, dict[str, Any]], ...]] = (
    ("kind_unknown", {"kind": "love"}), ("kind_empty", {"kind": ""}), ("kind_int", {"kind": 5}),
    ("kind_null", {"kind": None}), ("kind_upper", {"kind": "ACCEPTED"}),
    ("score_no_value", {"kind": "score", "value": None}),
    ("value_str", {"kind": "score", "value": "high"}),
    ("edited_no_text", {"kind": "edited", "payload": {"text": ""}}),
    ("extra_field", {"inference": "x"}), ("payload_list", {"kind": "comment", "payload": ["t"]}),
)
QUIRK_DOORS: Final[tuple[Door, ...]] = (
    "chat", "chat", "completions", "responses", "responses", "responses", "messages", "messages",
    "messages", "count_tokens",
)
ADMIN_GETS: Final = ("/admin/backends", "/admin/routing", "/admin/keys", "/admin/traffic/summary")
ADMIN_WRITES: Final = (
    ("POST", "/admin/keys"), ("POST", "/admin/reload"), ("DELETE", "/admin/canary"),
)
# (variant, method, path, body or None)
ADMIN_BAD: Final[tuple[tuple[str, str, str, Any], ...]] = (
    ("keys_name_empty", "POST", "/admin/keys", {"name": ""}),
    ("keys_name_int", "POST", "/admin/keys", {"name": 5}),
    ("keys_rpm_negative", "POST", "/admin/keys", {"name": "x", "rpm_limit": -1}),
    ("keys_budget_str", "POST", "/admin/keys", {"name": "x", "budget_usd": "lots"}),
    ("keys_unknown_field", "POST", "/admin/keys", {"nom": "x"}),
    ("keys_list_body", "POST", "/admin/keys", []),
    ("keys_name_nul", "POST", "/admin/keys", {"name": "ops\u0000key"}),
    ("keys_name_newline", "POST", "/admin/keys", {"name": "ops\nkey"}),
    ("canary_routing_int", "POST", "/admin/canary", {"routing": 5, "share": 0.5}),
    ("canary_share_2", "POST", "/admin/canary", {"routing": {}, "share": 2}),
    ("canary_no_routing", "POST", "/admin/canary", {"share": 0.1}),
    ("canary_unknown_target", "POST", "/admin/canary",
     {"routing": {"default": "nowhere"}, "share": 0.1}),
    ("export_int", "POST", "/admin/traffic/export", {"export": 5}),
    ("export_bad_since", "POST", "/admin/traffic/export",
     {"query": {"since": "yesterday"}, "export": {}}),
    ("export_empty", "POST", "/admin/traffic/export", {}),
    ("export_no_out_dir", "POST", "/admin/traffic/export", {"export": {"kind": "sft"}}),
    ("summary_by_unknown", "GET", "/admin/traffic/summary?by=nonsense", None),
    ("summary_by_twice", "GET", "/admin/traffic/summary?by=day,day", None),
    ("summary_since_word", "GET", "/admin/traffic/summary?since=yesterday", None),
    ("summary_tag_nul", "GET", "/admin/traffic/summary?tag=%00", None),
    ("summary_tag_value_nul", "GET", "/admin/traffic/summary?tag=k=%00", None),
    ("summary_route_nul", "GET", "/admin/traffic/summary?route_target=%00", None),
    ("summary_episode_nul", "GET", "/admin/traffic/summary?episode_id=a%00&by=day", None),
    ("export_filter_nul", "POST", "/admin/traffic/export",
     {"query": {"served_model": "m\u0000"}, "export": {"kind": "sft", "out_dir": "x"}}),
    ("summary_ok_only_word", "GET", "/admin/traffic/summary?ok_only=perhaps", None),
    ("drain_unknown_replica", "POST", "/admin/replicas/drain",
     {"target": "local", "replica": "http://nowhere:1"}),
    ("drain_unknown_target", "POST", "/admin/replicas/drain", {"target": "nope", "replica": "x"}),
    ("undrain_no_replica", "POST", "/admin/replicas/undrain", {"target": "local"}),
    ("drain_timeout_negative", "POST", "/admin/replicas/drain",
     {"target": "local", "replica": "x", "timeout_s": -1}),
    ("revoke_unknown", "POST", "/admin/keys/nope/revoke", None),
    ("revoke_dots", "POST", "/admin/keys/%2e%2e/revoke", None),
    ("revoke_nul", "POST", "/admin/keys/%00/revoke", None),
    ("revoke_long", "POST", "/admin/keys/" + "x" * 300 + "/revoke", None),
    ("unknown_path", "GET", "/admin/nope", None),
    ("wrong_method", "GET", "/admin/reload", None),
)
# fmt: on


def _apply(body: dict[str, Any], door: Door, where: str, value: Any) -> None:
    value = copy.deepcopy(value)
    if where == "+messages":
        body["messages"].append(value)
    elif where == "content":
        body["messages"][0 if door in ANTHROPIC_DOORS else -1]["content"] = value
    elif where.startswith("-"):
        body.pop(where[1:], None)
        if where == "-input":  # instructions alone are a request to answer ('input' is optional)
            body.pop("instructions", None)
    else:
        body[where] = value
    if where == "tool_choice" and door in ANTHROPIC_DOORS:
        body.setdefault("tools", [{"name": "f", "input_schema": SCHEMA}])
    if where == "stream_options":
        body["stream"] = False
    if where == "suffix":
        body["model"] = "gpt-4o-mini"  # a chat-only frontier model: refused, not dropped
    if where == "echo":
        body["logprobs"] = 5


def fam_door_quirks(rng: random.Random, t: Targets) -> HostileCase:
    door = pick_door(rng, QUIRK_DOORS)
    body = valid_body(door, rng, t)
    variant, expect, where, value = rng.choice(
        QUIRKS["messages" if door in ANTHROPIC_DOORS else door]
    )
    _apply(body, door, where, value)
    if door == "count_tokens" and where == "temperature":
        expect = "not5xx"  # count_tokens does not read sampling fields
    headers: tuple[tuple[str, str], ...] = ()
    path = PATHS[door]
    if door in ANTHROPIC_DOORS and rng.random() < 0.3:
        headers = (("anthropic-version", "1999-01-01"), ("anthropic-beta", "x" * 500))
        path += "?beta=true&beta=false&x=%00"
    family = f"door_quirks.{door}.{variant}"
    return body_case(door, family, dump(body), expect, headers=headers, path=path)


def fam_feedback(rng: random.Random, t: Targets) -> HostileCase:
    """Feedback on another key's answer, on unknown ids, without a key, with bad fields."""
    body = valid_body("feedback", rng, t)
    variant = rng.choice(
        (
            "others_id",
            "others_id",
            "no_key",
            "bad_key",
            "unknown_id",
            "unknown_id",
            "bad_field",
            "bad_field",
        )
    )
    cred: Credential = "key"
    slot: IdSlot | None = "own"
    if variant == "others_id":
        slot = "other"
    elif variant == "no_key":
        cred = "none"
    elif variant == "bad_key":
        cred = "bad_key"
    elif variant == "unknown_id":
        name, value = rng.choice(FEEDBACK_IDS)
        body["inference_id"], slot = value, None
        variant = f"id_{name}"
    else:
        variant, fields = rng.choice(FEEDBACK_BAD)
        body.update(fields)
        if fields.get("value", 0) is None:
            body.pop("value")
    family = f"feedback.{variant}"
    return make_case("feedback", family, dump(body), "4xx", credential=cred, id_slot=slot)


def fam_admin(rng: random.Random, t: Targets) -> HostileCase:
    """The admin API without a token, with a wrong one, and with bad bodies and queries."""
    mode = rng.choice(("no_token", "bad_token", "bad_request", "bad_request", "bad_request"))
    if mode != "bad_request":
        method, path = rng.choice((("GET", rng.choice(ADMIN_GETS)), *ADMIN_WRITES))
        cred: Credential = "none" if mode == "no_token" else "bad_admin"
        return make_case(
            "admin",
            f"admin.{mode}",
            dump({"name": "x"}),
            "4xx",
            method=method,
            path=path,
            credential=cred,
        )
    variant, method, path, body = rng.choice(ADMIN_BAD)
    raw = b"" if body is None else dump(body)
    ctype = None if body is None else "application/json"
    return make_case(
        "admin", f"admin.{variant}", raw, "4xx", method=method, path=path, content_type=ctype
    )
