"""A prompt longer than a target's context window is never sent there
(``gateway/routing/context_window.py``): an explicit target refuses it with a 400, ``auto`` goes
where it fits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.errors import ContextWindowExceededError
from gateway.routing.context_window import fit_windows
from gateway.routing.table import Routing
from router.features import RequestFeatures
from router.policy import RulePolicy

WINDOWS: dict[str, int | None] = {"small": 1000, "large": 100_000, "huge": 1_000_000, "local": None}


def routing(**section: Any) -> Routing:
    backends: dict[str, dict[str, Any]] = {
        name: {"kind": "litellm", "model": f"openai/{name}"} for name in ("small", "large", "huge")
    }
    backends["local"] = {"kind": "vllm", "model": "ours", "replicas": ["http://127.0.0.1:1"]}
    config = parse_config(
        {
            "backends": backends,
            "routing": {"aliases": {"auto": None, "gpt-small": "small"}, **section},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    return Routing(RulePolicy(config.routing, config.backends), {}, config)


@dataclass
class Size:
    """A prompt of ``n`` tokens for every target, whose bound without a count is ``bound``."""

    n: int
    bound: int | None = None
    counted: list[str] = field(default_factory=list)

    def tokens(self, target: str) -> int:
        self.counted.append(target)
        return self.n

    def at_most(self, target: str) -> int:
        return self.bound if self.bound is not None else 4 * self.n


def decide(r: Routing, model: str, tokens: int) -> Any:
    decision = r.policy.decide(RequestFeatures("chat.completions", model, tokens))
    return fit_windows(decision, r, WINDOWS.get, Size(tokens))


def test_a_prompt_whose_bound_fits_every_window_is_not_counted() -> None:
    r = routing(default="small", fallbacks={"small": ["large"]})
    decision = r.policy.decide(RequestFeatures("chat.completions", "auto", 10))
    size = Size(900, bound=1000)
    assert fit_windows(decision, r, WINDOWS.get, size) == decision
    assert size.counted == []
    loose = Size(900, bound=1001)  # the bound no longer settles it for "small": counted there
    assert fit_windows(decision, r, WINDOWS.get, loose) == decision
    assert loose.counted == ["small"]


def test_a_prompt_that_fits_keeps_the_decision_as_it_was() -> None:
    r = routing(default="small", fallbacks={"small": ["large"]})
    before = r.policy.decide(RequestFeatures("chat.completions", "auto", 10))
    assert decide(r, "auto", 10) == before


def test_auto_skips_a_target_too_small_for_the_prompt_and_keeps_what_the_policy_chose() -> None:
    r = routing(default="small", fallbacks={"small": ["large", "huge"]})
    decision = decide(r, "auto", 5000)
    assert decision.targets == ("large", "huge")
    assert decision.decided_target == "small"  # what the policy chose, for off-policy estimates
    assert "context window too small: small (5000 > 1000)" in decision.reason


def test_auto_goes_beyond_its_chain_to_a_target_whose_known_window_fits() -> None:
    r = routing(default="small", fallbacks={"large": ["small", "huge"]})
    decision = decide(r, "auto", 5000)
    assert decision.targets == ("large", "huge")  # "local" (no known window) is not chosen
    decision = decide(r, "auto", 500_000)
    assert decision.targets == ("huge",)


def test_a_target_without_a_known_window_stays_in_its_chain() -> None:
    r = routing(default="local", fallbacks={"local": ["small"]})
    assert decide(r, "auto", 5000).targets == ("local",)


def test_a_prompt_no_target_fits_is_refused_naming_the_largest_window() -> None:
    r = routing(default="small", fallbacks={"small": ["large", "huge"]})
    with pytest.raises(ContextWindowExceededError) as refused:
        decide(r, "auto", 2_000_000)
    assert refused.value.status == 400 and refused.value.code == "context_length_exceeded"
    assert "2000000 tokens" in refused.value.message and "1000000" in refused.value.message


@pytest.mark.parametrize("model", ["small", "gpt-small"])  # a target's name, a pinned alias
def test_an_explicit_target_too_small_is_refused_not_rerouted(model: str) -> None:
    r = routing(default="large", fallbacks={"small": ["large"]})
    with pytest.raises(ContextWindowExceededError, match="the target `small` \\(1000 tokens\\)"):
        decide(r, model, 5000)
    assert decide(r, model, 500).targets == ("small", "large")


def test_an_explicit_target_that_fits_loses_only_its_fallbacks_that_do_not() -> None:
    r = routing(default="large", fallbacks={"large": ["small", "huge"]})
    assert decide(r, "large", 5000).targets == ("large", "huge")
