"""Input bounds: what one request body may hold, checked at every door before any upstream work.

A parsed JSON body is refused with :class:`~gateway.errors.InvalidRequestError` (400, in the
door's own error shape, ``param`` naming where) when:

- it nests deeper than ``max_json_depth`` (an object or an array is one level). The record's JSON
  encoder stops at 255 levels and the provider SDKs recurse per level, so depth is bounded once
  here rather than failing later in the writer, an encoder or a back-end;
- any string holds more than ``max_string_chars`` characters;
- ``messages`` (chat, Anthropic) or ``input`` (Responses) or a ``prompt`` list (completions) has
  more than ``max_messages`` items;
- a message's ``content`` list has more than ``max_content_parts`` parts;
- ``tools`` has more than ``max_tools`` items, or one tool nests deeper than
  ``max_tool_schema_depth`` (its JSON schema included).

One pass over the body, iterative (a hostile depth never reaches Python's recursion limit); the
path of the offending value is rebuilt only on failure. The pass is pure Python, so doors run it
(with the parse) on a worker thread for bodies over ``limits.offload_body_bytes``.
"""

from __future__ import annotations

from typing import Any

from gateway.config import LimitsConfig
from gateway.errors import InvalidRequestError

_LIST_KEYS = ("messages", "input", "prompt")
_MAX_PATH_CHARS = 120


def check_bounds(body: dict[str, Any], limits: LimitsConfig) -> None:
    """Raise ``InvalidRequestError`` naming the first bound ``body`` breaks; else return."""
    for key in _LIST_KEYS:
        items = body.get(key)
        if isinstance(items, list) and not (key == "prompt" and items and _is_int(items[0])):
            if len(items) > limits.max_messages:
                raise _refuse(
                    f"'{key}' has {len(items)} items; at most {limits.max_messages} are allowed",
                    key,
                    "too_many_messages",
                )
            _check_parts(items, key, limits.max_content_parts)
    tools = body.get("tools")
    if isinstance(tools, list):
        if len(tools) > limits.max_tools:
            raise _refuse(
                f"'tools' has {len(tools)} items; at most {limits.max_tools} are allowed",
                "tools",
                "too_many_tools",
            )
        for i, tool in enumerate(tools):
            _walk(tool, f"tools[{i}]", limits.max_tool_schema_depth, limits.max_string_chars)
    _walk(body, "", limits.max_json_depth, limits.max_string_chars)


def check_depth(value: Any, limits: LimitsConfig, where: str = "") -> None:
    """Depth and string bounds only (feedback payloads, admin bodies)."""
    _walk(value, where, limits.max_json_depth, limits.max_string_chars)


def _is_int(value: object) -> bool:
    # A completions prompt of token ids is one prompt, not a batch.
    return isinstance(value, int) and not isinstance(value, bool)


def _check_parts(items: list[Any], key: str, max_parts: int) -> None:
    for i, item in enumerate(items):
        if isinstance(item, dict):
            content = item.get("content")
            if isinstance(content, list) and len(content) > max_parts:
                raise _refuse(
                    f"'{key}[{i}].content' has {len(content)} parts; at most {max_parts} "
                    "are allowed",
                    f"{key}[{i}].content",
                    "too_many_content_parts",
                )


def _walk(root: Any, where: str, max_depth: int, max_chars: int) -> None:
    # Each stack entry: (container, its depth, index of its parent entry in ``seen``, its key).
    # ``seen`` keeps (parent index, key) per container so a failure can name its path.
    if not isinstance(root, dict | list):
        if isinstance(root, str) and len(root) > max_chars:
            raise _too_long(where, len(root), max_chars)
        return
    seen: list[tuple[int, object]] = [(-1, None)]
    stack: list[tuple[Any, int, int]] = [(root, 1, 0)]
    while stack:
        node, depth, me = stack.pop()
        if depth > max_depth:
            path = _path(seen, me, where)
            raise _refuse(
                f"'{path or 'body'}' nests deeper than {max_depth} levels", path, "too_deep"
            )
        pairs = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in pairs:
            if isinstance(value, dict | list):
                seen.append((me, key))
                stack.append((value, depth + 1, len(seen) - 1))
            elif isinstance(value, str) and len(value) > max_chars:
                seen.append((me, key))
                raise _too_long(_path(seen, len(seen) - 1, where), len(value), max_chars)


def _path(seen: list[tuple[int, object]], index: int, where: str) -> str:
    keys: list[object] = []
    while index > 0:
        parent, key = seen[index]
        keys.append(key)
        index = parent
    out = where
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
        if len(out) > _MAX_PATH_CHARS:  # a hostile depth would make the message huge
            return out[:_MAX_PATH_CHARS] + "..."
    return out


def _too_long(path: str, n: int, max_chars: int) -> InvalidRequestError:
    return _refuse(
        f"'{path or 'body'}' holds {n} characters; at most {max_chars} are allowed",
        path,
        "string_too_long",
    )


def _refuse(message: str, param: str, code: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param or None, code=code)
