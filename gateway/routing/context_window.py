"""Context windows in the routing decision: a prompt longer than a target's window is never sent
to that target.

    explicit (the model named is a target, or an alias pinned to one):
        that target's window too small   -> 400 context_length_exceeded, before any call
    routed (auto: rules, the learned scorer, an episode's fallback):
        the chain's targets that fit, in order; none -> the first other target (in the config's
        order) whose known window fits, followed by its own fallbacks that fit; none -> 400
    either way, a fallback whose window is too small is dropped from the chain.

A window is the target's ``max_input_tokens`` (configured, else litellm's model map:
:meth:`~gateway.backends.pricing.PriceBook.max_input_tokens`). A target whose window is unknown
(a local target without one configured) fits any prompt of a chain it is in, but is never
chosen for a prompt that no target of the chain fits. A prompt's size is counted for each
target as that target counts (:class:`~gateway.backends.prompt_count.PromptSizes`), and only
where a bound that needs no count (its UTF-8 bytes) does not already fit the window. A changed
chain keeps the policy's choice as ``decided`` (off-policy estimates see what the policy chose)
and says why in ``reason``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from gateway.errors import ContextWindowExceededError
from gateway.routing.table import Routing
from router.decision import PINNED_KINDS, RouteDecision

Window = Callable[[str], int | None]  # a target's window (None: unknown)


class PromptSize(Protocol):
    """The prompt's size for each target (gateway.backends.prompt_count.PromptSizes)."""

    def tokens(self, target: str) -> int:
        """As the target counts (may encode the prompt)."""
        ...

    def at_most(self, target: str) -> int:
        """A bound of :meth:`tokens` that needs no count."""
        ...


def fit_windows(
    decision: RouteDecision, routing: Routing, window: Window, size: PromptSize
) -> RouteDecision:
    """``decision`` with its chain fitted to the targets' windows (module docstring); raises
    :class:`ContextWindowExceededError` when nothing may serve the prompt. A prompt is counted
    for a target only when its bound does not already fit the window."""
    tokens = size.tokens

    def fits(target: str, known_only: bool = False) -> bool:
        limit = window(target)
        if limit is None:
            return not known_only
        return size.at_most(target) <= limit or tokens(target) <= limit

    chain = decision.targets
    kept = tuple(t for t in chain if fits(t))
    explicit = decision.kind in PINNED_KINDS
    if explicit and (not kept or kept[0] != chain[0]):
        first = chain[0]
        raise _exceeded(f"the target `{first}`", tokens(first), window(first))
    if kept == chain:
        return decision
    dropped = [t for t in chain if t not in kept]
    if not kept:
        other = next(
            (t for t in routing.config.backends if t not in chain and fits(t, known_only=True)),
            None,
        )
        if other is None:
            largest = max(chain, key=lambda t: window(t) or 0)
            raise _exceeded("every target that may serve it", tokens(largest), window(largest))
        kept = tuple(t for t in routing.policy.chain(other) if fits(t))
    sizes = ", ".join(f"{t} ({tokens(t)} > {window(t)})" for t in dropped)
    return replace(
        decision,
        targets=kept,
        reason=f"{decision.reason}; context window too small: {sizes}",
        decided=decision.decided_target,
    )


def _exceeded(what: str, size: int, limit: int | None) -> ContextWindowExceededError:
    return ContextWindowExceededError(
        f"This request's prompt is {size} tokens, longer than the context window of {what} "
        f"({limit} tokens). Shorten the conversation or choose a model with a larger window.",
        param="messages",
    )
