"""Where a frontier back-end can be called directly, in the wire format the gateway already speaks.

A ``kind: litellm`` back-end names ``provider/model``. When the provider speaks one of the
formats our doors speak (OpenAI chat completions and Responses, Anthropic Messages), the gateway
posts the body
itself over its own HTTP session: a :class:`ProviderRoute` says where and with which headers. Any
other provider (Bedrock, Vertex, Gemini, Cohere, ...) has no route here and is called through
litellm's ``acompletion``, which translates it.

Why this is resolved here and not by ``litellm.get_llm_provider``: litellm's package import costs
seconds of CPU and much memory, and its per-call path (``acompletion``, its stream wrapper,
logging and cost hooks) costs about ten times the CPU of the whole gateway hop when it posts the
bytes itself, and twice that hop's again per streamed chunk (docs/hot_path.md). The two wire
formats are the gateway's own (it serves both); what a route adds is only the provider's base URL
and how its key is sent. The OpenAI-compatible providers litellm describes as data (its
``llms/openai_like/providers.json``: base URL and key variable per provider) are read from that
file, without importing litellm, so the list stays litellm's.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import orjson

from gateway.config import BackendConfig

ProviderWire = Literal["openai", "anthropic"]

ANTHROPIC_VERSION = "2023-06-01"
# Client headers that belong to the wire format and travel with a pass-through.
FORWARDED_HEADERS: dict[ProviderWire, tuple[str, ...]] = {
    "anthropic": ("anthropic-version", "anthropic-beta"),
    "openai": ("openai-beta",),
}


# Providers whose chat endpoint is OpenAI's, with their default base URL (litellm's defaults).
_OPENAI_COMPATIBLE: dict[str, str | None] = {
    "openai": "https://api.openai.com/v1",
    "text-completion-openai": "https://api.openai.com/v1",
    "hosted_vllm": None,  # no default: the config must give api_base
    "openai_like": None,
    "deepseek": "https://api.deepseek.com/v1",
    "groq": "https://api.groq.com/openai/v1",
    "together_ai": "https://api.together.xyz/v1",
    "fireworks_ai": "https://api.fireworks.ai/inference/v1",
    "mistral": "https://api.mistral.ai/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "xai": "https://api.x.ai/v1",
    "deepinfra": "https://api.deepinfra.com/v1/openai",
    "perplexity": "https://api.perplexity.ai",
    "cerebras": "https://api.cerebras.ai/v1",
}
_ANTHROPIC_BASE = "https://api.anthropic.com"
# Providers that serve OpenAI's Responses API (``POST {base}/responses``) as OpenAI defines it,
# unless the config says (``responses_api``): the Responses door passes its client's body to
# them. The other OpenAI-compatible providers serve chat completions only, or a subset of that
# API of their own: translated to chat.
_RESPONSES_PROVIDERS = frozenset({"openai"})


@dataclass(frozen=True, slots=True)
class ProviderRoute:
    """How to call one provider directly: its wire format, endpoint URLs and fixed headers."""

    wire: ProviderWire
    provider: str
    model: str  # the provider's own model name (the config's, without the provider prefix)
    chat_url: str  # OpenAI: .../chat/completions; Anthropic: .../v1/messages
    completions_url: str | None  # OpenAI text-completion models only
    headers: dict[str, str] = field(default_factory=dict)
    responses_url: str | None = None  # the providers serving OpenAI's Responses API


def openai_like_registry() -> dict[str, str]:
    """litellm's JSON registry of OpenAI-compatible providers: slug -> base URL (blocking: a
    small package data file read without importing litellm)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(next(iter(spec.submodule_search_locations))) / "llms/openai_like/providers.json"
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return {
        slug: str(entry["base_url"])
        for slug, entry in data.items()
        if isinstance(entry, dict)
        and "base_url" in entry
        # providers that remap parameters need litellm's translation: not a pass-through
        and not entry.get("param_mappings")
        and not entry.get("special_handling")
    }


def _anthropic_messages_url(base: str) -> str:
    base = base.rstrip("/")
    if base.endswith("/v1/messages"):
        return base
    if base.endswith("/v1"):
        return base + "/messages"
    return base + "/v1/messages"


def resolve_route(
    config: BackendConfig, api_key: str | None, openai_like: dict[str, str]
) -> ProviderRoute | None:
    """The direct route of a ``kind: litellm`` back-end, or None: call it through litellm.

    ``openai_like`` is :func:`openai_like_registry`'s answer, read once at start-up."""
    if config.kind != "litellm":
        return None
    provider, _, model = config.model.partition("/")
    extra = dict(config.extra_headers)
    if provider == "anthropic":
        headers = {"anthropic-version": ANTHROPIC_VERSION, **extra}
        if api_key:
            headers["x-api-key"] = api_key
        url = _anthropic_messages_url(config.api_base or _ANTHROPIC_BASE)
        return ProviderRoute("anthropic", provider, model, url, None, headers)
    base: str | None
    if provider in _OPENAI_COMPATIBLE:
        base = config.api_base or _OPENAI_COMPATIBLE[provider]
    elif provider in openai_like:
        base = config.api_base or openai_like[provider]
    else:
        return None
    if base is None:
        return None
    base = base.rstrip("/")
    headers = dict(extra)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if provider == "text-completion-openai":
        return ProviderRoute("openai", provider, model, "", base + "/completions", headers)
    serves_responses = config.responses_api
    if serves_responses is None:
        serves_responses = provider in _RESPONSES_PROVIDERS
    responses = base + "/responses" if serves_responses else None
    chat = base + "/chat/completions"
    return ProviderRoute("openai", provider, model, chat, None, headers, responses)
