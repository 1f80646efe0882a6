"""Routing policy v1: aliases, first-match rules, a default, and a fallback chain.

Decision order for a request asking for model ``m``:
1. ``m`` is an alias pinned to a target -> that target (rules are skipped unless
   ``pinned_aliases_use_rules``).
2. ``m`` is an alias mapped to ``null`` (``auto``) -> the first rule whose conditions all hold;
   no rule matches -> ``default``.
3. ``m`` is itself a target name -> that target.
4. Otherwise :class:`UnknownModelError`.
The chosen target is followed by its fallbacks (deduplicated, order kept).

Pure: no I/O, no clock; the policy object is immutable and swapped whole on reload.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from router.config import MatchConfig, RoutingConfig
from router.decision import DecisionKind, RouteDecision
from router.errors import PolicyConfigError, UnknownModelError
from router.features import RequestFeatures


class RoutingPolicy(Protocol):
    """One required method; everything it needs arrives in ``RequestFeatures``."""

    @property
    def version(self) -> str: ...

    def decide(self, features: RequestFeatures) -> RouteDecision: ...

    def model_names(self) -> list[str]: ...

    def chain(self, target: str) -> tuple[str, ...]:
        """``target`` followed by its fallbacks (a decision made outside the policy uses it)."""
        ...


def matches(match: MatchConfig, f: RequestFeatures) -> bool:
    """True when every condition given in ``match`` holds for ``f``."""
    if match.models is not None and f.requested_model not in match.models:
        return False
    if match.endpoints is not None and f.endpoint not in match.endpoints:
        return False
    if match.route_hint is not None and f.route_hint not in match.route_hint:
        return False
    if match.tags is not None and any(f.tags.get(k) != v for k, v in match.tags.items()):
        return False
    if match.min_prompt_tokens is not None and f.prompt_tokens < match.min_prompt_tokens:
        return False
    if match.max_prompt_tokens is not None and f.prompt_tokens > match.max_prompt_tokens:
        return False
    if match.has_tools is not None and f.has_tools != match.has_tools:
        return False
    return match.stream is None or f.stream == match.stream


class RulePolicy:
    """The declarative policy of :mod:`router.config`."""

    def __init__(self, config: RoutingConfig, targets: Iterable[str]) -> None:
        self._config = config
        self._targets = frozenset(targets)
        unknown = config.referenced_targets() - self._targets
        if unknown:
            raise PolicyConfigError(
                f"routing refers to undefined targets {sorted(unknown)}; "
                f"define them under `backends:` or use one of {sorted(self._targets)}"
            )
        self._chains = {t: self._chain(t) for t in self._targets}

    @property
    def version(self) -> str:
        return self._config.version

    @property
    def config(self) -> RoutingConfig:
        return self._config

    def model_names(self) -> list[str]:
        names = list(self._config.aliases)
        names.extend(t for t in sorted(self._targets) if t not in self._config.aliases)
        return names

    def chain(self, target: str) -> tuple[str, ...]:
        """``target`` followed by its fallbacks."""
        return self._chains[target]

    def _chain(self, target: str) -> tuple[str, ...]:
        chain = [target]
        for nxt in self._config.fallbacks.get(target, []):
            if nxt not in chain:
                chain.append(nxt)
        return tuple(chain)

    def decide(self, features: RequestFeatures) -> RouteDecision:
        model = features.requested_model
        aliases = self._config.aliases
        if model in aliases:
            pinned = aliases[model]
            if pinned is not None and not self._config.pinned_aliases_use_rules:
                return self._decision(pinned, f"alias:{model}", "alias")
            for rule in self._config.rules:
                if matches(rule.match, features):
                    return self._decision(rule.target, f"rule:{rule.name}", "rule")
            if pinned is not None:
                return self._decision(pinned, f"alias:{model}", "alias")
            return self._decision(self._config.default, "default", "default")
        if model in self._targets:
            return self._decision(model, "target", "target")
        raise UnknownModelError(model, self.model_names())

    def _decision(self, target: str, reason: str, kind: DecisionKind) -> RouteDecision:
        return RouteDecision(self._chains[target], reason, self._config.version, kind=kind)
