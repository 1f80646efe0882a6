"""The attribute names a request's spans carry: OpenTelemetry's GenAI semantic conventions and
our own stable ``switchyard.*`` ones, and the few mappings they need (no OpenTelemetry import).

GenAI names as the conventions define them (opentelemetry-semantic-conventions 0.66b2,
``_incubating/attributes/gen_ai_attributes.py``, now kept in the GenAI semantic-conventions
repository): ``gen_ai.provider.name`` replaces ``gen_ai.system`` and ``gen_ai.usage.input_tokens``
/ ``output_tokens`` replace ``prompt_tokens`` / ``completion_tokens``. An attempt's span also
sets ``gen_ai.system``, to the same value, for the backends that still read only it (vLLM's own
span still uses the older usage names). Strings here, not the package's constants: the package
marks them deprecated there, and the names are the contract.

``switchyard.*`` names are ours and stable (dashboards and alerts read them): they are never
renamed, only added to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gateway.config import BackendConfig

OPERATION: Final = "gen_ai.operation.name"
PROVIDER: Final = "gen_ai.provider.name"
SYSTEM: Final = "gen_ai.system"  # deprecated by the conventions; what older backends read
REQUEST_MODEL: Final = "gen_ai.request.model"
RESPONSE_MODEL: Final = "gen_ai.response.model"
RESPONSE_ID: Final = "gen_ai.response.id"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
MAX_TOKENS: Final = "gen_ai.request.max_tokens"
TEMPERATURE: Final = "gen_ai.request.temperature"
TOP_P: Final = "gen_ai.request.top_p"
STREAM: Final = "gen_ai.request.stream"
INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
CACHE_READ_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
CACHE_WRITE_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
TIME_TO_FIRST_CHUNK: Final = "gen_ai.response.time_to_first_chunk"  # seconds
ERROR_TYPE: Final = "error.type"
HTTP_STATUS: Final = "http.response.status_code"

# The conventions' well-known gen_ai.provider.name values, by litellm's provider prefix (any
# other prefix is its own name; our vLLM replicas are "vllm").
_PROVIDERS: Final = {
    "openai": "openai",
    "text-completion-openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "azure_text": "azure.ai.openai",
    "azure_ai": "azure.ai.inference",
    "bedrock": "aws.bedrock",
    "bedrock_converse": "aws.bedrock",
    "cohere": "cohere",
    "cohere_chat": "cohere",
    "deepseek": "deepseek",
    "gemini": "gcp.gemini",
    "vertex_ai": "gcp.vertex_ai",
    "groq": "groq",
    "mistral": "mistral_ai",
    "perplexity": "perplexity",
    "watsonx": "ibm.watsonx.ai",
    "xai": "x_ai",
    "hosted_vllm": "vllm",
}
# gen_ai.operation.name by door or upstream endpoint (chat for every conversation format).
_OPERATIONS: Final = {"completions": "text_completion"}
# The request's sampling fields, as each wire format spells its output limit.
_MAX_TOKENS_FIELDS: Final = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def provider_name(config: BackendConfig) -> str:
    """``gen_ai.provider.name`` of a target."""
    if config.kind == "vllm":
        return "vllm"
    prefix, sep, _ = config.model.partition("/")
    return _PROVIDERS.get(prefix, prefix) if sep else "openai"


def upstream_model(config: BackendConfig) -> str:
    """The model name the provider is asked for (litellm's ``provider/`` prefix left out)."""
    if config.kind == "vllm":
        return config.model
    return config.model.partition("/")[2] or config.model


def operation_name(endpoint: str) -> str:
    """``gen_ai.operation.name`` of a door's or an upstream call's endpoint."""
    return _OPERATIONS.get(endpoint, "chat")


def request_attributes(body: Mapping[str, Any] | None) -> dict[str, Any]:
    """The sampling attributes a request body sets (its output limit, temperature, top_p,
    whether it streams); values of the wrong type are left out."""
    out: dict[str, Any] = {}
    if not body:
        return out
    for name in _MAX_TOKENS_FIELDS:
        value = body.get(name)
        if type(value) is int:
            out[MAX_TOKENS] = value
            break
    for key, name in ((TEMPERATURE, "temperature"), (TOP_P, "top_p")):
        value = body.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(value)
    stream = body.get("stream")
    if isinstance(stream, bool):
        out[STREAM] = stream
    return out
