"""A gateway whose every target is the frontier simulator: the config the tests, the hostile-input
run and the loop-lag benchmark share.

``local`` is a ``vllm``-kind target pointed at the simulator (it speaks OpenAI's API, so the
gateway's pass-through path is what runs); ``frontier-openai``, ``frontier-text`` and
``frontier-anthropic`` are frontier targets on the simulator's OpenAI and Anthropic routes: posted
directly where the door speaks the provider's format, through litellm where it does not.
"""

from __future__ import annotations

from typing import Any

from serving.names import LOCAL_MODEL_NAME


def simulator_backends(sim_url: str) -> dict[str, Any]:
    """The four targets, by name, as a ``backends`` section."""
    return {
        "local": {"kind": "vllm", "model": "sim-local", "replicas": [sim_url]},
        "frontier-openai": {
            "kind": "litellm",
            "model": "openai/gpt-4o-mini",
            "api_base": sim_url + "/v1",
            "input_usd_per_mtok": 0.15,
            "output_usd_per_mtok": 0.6,
        },
        "frontier-text": {
            "kind": "litellm",
            "model": "text-completion-openai/gpt-3.5-turbo-instruct",
            "api_base": sim_url + "/v1",
        },
        "frontier-anthropic": {
            "kind": "litellm",
            "model": "anthropic/claude-haiku-4-5",
            "api_base": sim_url,
        },
    }


def simulator_aliases() -> dict[str, str | None]:
    """Model names a client may call: ``auto`` for the router, one name per target."""
    return {
        "auto": None,
        LOCAL_MODEL_NAME: "local",
        "gpt-4o-mini": "frontier-openai",
        "claude-haiku-4-5": "frontier-anthropic",
        "instruct": "frontier-text",
    }
