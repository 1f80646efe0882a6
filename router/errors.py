"""Errors raised by routing decisions.

RoutingError
 +-- UnknownModelError      the requested model is neither an alias nor a target
 +-- PolicyConfigError      a routing config that cannot be applied (bad reference, bad YAML)

The gateway maps these to HTTP in its single error mapping (``gateway.errors``).
"""

from __future__ import annotations


class RoutingError(Exception):
    """Base of every error the router raises."""


class UnknownModelError(RoutingError):
    def __init__(self, model: str, known: list[str]) -> None:
        self.model = model
        self.known = known
        super().__init__(
            f"The model `{model}` does not exist. Available models: {', '.join(sorted(known))}"
        )


class PolicyConfigError(RoutingError):
    """The routing config is invalid; the message says what to change."""
