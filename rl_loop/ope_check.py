"""Does the off-policy estimate predict what users get next? The flywheel's check of it.

After each round's refit, the routing state just fitted is evaluated on that round's record
two ways, before any of its decisions is served:
- ``router.ope.off_policy``: the doubly robust estimate of its accept rate from the logged
  propensities, with its 95% interval and the share of rows without overlap, counting only the
  local verdicts of the weights the next round serves (a promotion's old weights' local
  failures say nothing of the new weights: they are valued by the reward model instead);
- ``router.replay.replay``: the console's older replay preview (recorded verdicts where the
  policy agrees with what was served, shadow verdicts and class means elsewhere), a point.
The next round's realised accept rate (``rl_loop.report``) is what both are judged against:
:func:`coverage` reads them from a run's rounds. The interval is one for the policy's expected
accept rate; the next round realises it on a finite count, so :func:`coverage` also says whether
the prediction interval for that count covers it (the interval's standard error and the
binomial one of the round's judged requests, added in quadrature: ``covered_predictive``).
The target reads ``covered``; the other is for telling noise from a biased estimate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import pairwise
from math import sqrt
from pathlib import Path
from typing import Any

from rl_loop.config import RefitConfig
from rl_loop.outcomes import VerdictCache
from rl_loop.replay import build_policy, load_routing, read_state, replay_items
from router.ope import Z95, off_policy
from router.replay import Arm, replay
from traffic.store import StoreBackend


async def round_estimate(
    store: StoreBackend,
    config_path: Path,
    state_file: Path,
    cache: VerdictCache,
    since: datetime,
    local_weights: str | None = None,
) -> dict[str, Any]:
    """The fitted state's estimated accept rate on the requests recorded since ``since``;
    ``local_weights``: the weights version its local answers will come from (the next round's),
    whose local verdicts alone the estimate counts (None: every one)."""
    routing, arms = load_routing(config_path)
    policy = build_policy(routing, list(arms), read_state(state_file))
    class_tags = list(RefitConfig().class_tags)
    items = await replay_items(store, arms, class_tags, cache, since, local_weights)

    def arm_of(target: str) -> Arm:
        return arms.get(target, "frontier")

    estimate = off_policy(policy, items, arm_of, local_weights=local_weights)
    replayed = replay(policy, items, arm_of).overall
    accept = estimate.accept
    return {
        "policy": policy.version,
        "local_weights": local_weights,
        "rows": estimate.rows,
        "without_propensity": estimate.without_propensity,
        "estimate": None if accept is None else accept.value,
        "low": None if accept is None else accept.low,
        "high": None if accept is None else accept.high,
        "no_overlap": None if accept is None else accept.no_overlap,
        "local_share": estimate.local_share,
        "replay_accept": replayed.accept_rate,
    }


def coverage(rounds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per round with an estimate: the next round's realised accept rate, whether the interval
    covers it, and both estimates' absolute errors."""
    out: list[dict[str, Any]] = []
    for now, nxt in pairwise(rounds):
        ope = now.get("ope") or {}
        realised = nxt["overall"].get("accept_overall")
        if ope.get("estimate") is None or realised is None:
            continue
        judged = int(nxt["overall"].get("judged_local") or 0)
        judged += int(nxt["overall"].get("judged_frontier") or 0)
        p = float(ope["estimate"])
        spread = sqrt(((ope["high"] - ope["low"]) / (2 * Z95)) ** 2 + p * (1 - p) / max(judged, 1))
        out.append(
            {
                "round": now["round"],
                "realised_next": realised,
                "covered": ope["low"] <= realised <= ope["high"],
                "covered_predictive": abs(realised - p) <= Z95 * spread,
                "ope_abs_error": abs(ope["estimate"] - realised),
                "replay_abs_error": abs(ope["replay_accept"] - realised),
                "interval": [ope["low"], ope["high"]],
            }
        )
    return out
