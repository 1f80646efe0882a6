"""The request as the router sees it: one frozen struct, so adding an input never changes a
signature (as in SGLang's router, whose policies get everything they need in one struct).

The gateway builds it from the parsed request body and headers without tokenizing: the prompt
size is an estimate (characters / 4, the usual rule of thumb for BPE on English and code), which is
what rules on "prompt token count" compare against.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from router.request_text import RequestText

# The API a request came through: the one definition of these names (the gateway records them,
# the RL loop reads them back from the traffic record).
Endpoint = Literal["chat.completions", "completions", "responses", "messages"]
ENDPOINTS: Final[tuple[Endpoint, ...]] = get_args(Endpoint)

CHARS_PER_TOKEN = 4


def unit_hash(key: str, salt: str = "") -> float:
    """A stable number in [0, 1) for ``key``: the same request always lands in the same share."""
    digest = hashlib.blake2b((salt + key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def estimate_tokens(chars: int) -> int:
    """Approximate token count from a character count (never below 1 for a non-empty text)."""
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    endpoint: Endpoint
    requested_model: str
    prompt_tokens: int
    has_tools: bool = False
    stream: bool = False
    route_hint: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    api_key_id: str | None = None
    episode_id: str | None = None
    cache_key: str | None = None
    request_id: str | None = None  # the record's id: a stable key for sampling (canary, explore)
    prompt_token_ids: tuple[int, ...] | None = None  # filled for cache-aware replica choice
    text: RequestText | None = None  # what the request says, for the learned scorer


def recorded_features(
    endpoint: str,
    request: Mapping[str, Any],
    text: RequestText,
    *,
    tags: Mapping[str, str],
    api_key_id: str | None,
    episode_id: str | None,
    request_id: str,
) -> RequestFeatures:
    """The router's view of a recorded request (the RL loop's outcomes and replays, the
    console's replay preview): the prompt size estimated as the gateway does, notes
    (``note.*`` tags) left out, ``text`` read from the record's canonical conversation."""
    known: Endpoint = next((e for e in ENDPOINTS if e == endpoint), "chat.completions")
    return RequestFeatures(
        endpoint=known,
        requested_model=str(request.get("model") or ""),
        prompt_tokens=estimate_tokens(len(json.dumps(request.get("messages") or ""))),
        has_tools=bool(request.get("tools")),
        stream=bool(request.get("stream")),
        tags={k: v for k, v in tags.items() if not k.startswith("note.")},
        api_key_id=api_key_id,
        episode_id=episode_id,
        request_id=request_id,
        text=text,
    )
