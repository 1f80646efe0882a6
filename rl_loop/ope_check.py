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
:func:`coverage` reads them from a run's rounds. What a round realises is a finite draw around
the policy's expected rate, so the interval held against it is the prediction interval for a
window as large as the one estimated on (``router.ope.Estimate.predict``: the estimate's
standard error and that window's binomial one in quadrature; the next round's count is not
known when the estimate is made): ``covered``. The interval for the expected rate itself is
kept beside it (``covered_expected``): it tells a biased estimate from a noisy round.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from rl_loop.config import RefitConfig
from rl_loop.outcomes import VerdictCache
from rl_loop.replay import build_policy, load_routing, read_state, replay_items
from router.ope import Estimate, off_policy
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
        "window_low": None if estimate.accept_window is None else estimate.accept_window[0],
        "window_high": None if estimate.accept_window is None else estimate.accept_window[1],
        "no_overlap": None if accept is None else accept.no_overlap,
        "local_share": estimate.local_share,
        "replay_accept": replayed.accept_rate,
    }


def coverage(rounds: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per round with an estimate: the next round's realised accept rate, whether the prediction
    interval (``covered``; a run recorded without one: computed from the interval at the
    round's own row count) and the expected rate's interval (``covered_expected``) cover it,
    and both estimates' absolute errors."""
    out: list[dict[str, Any]] = []
    for now, nxt in pairwise(rounds):
        ope = now.get("ope") or {}
        realised = nxt["overall"].get("accept_overall")
        if ope.get("estimate") is None or realised is None:
            continue
        window = (ope.get("window_low"), ope.get("window_high"))
        if window[0] is None or window[1] is None:
            expected = Estimate(ope["estimate"], ope["low"], ope["high"], 0, 0.0, 0.0)
            window = expected.predict(int(ope.get("rows") or 0))
        out.append(
            {
                "round": now["round"],
                "realised_next": realised,
                "covered": window[0] <= realised <= window[1],
                "covered_expected": ope["low"] <= realised <= ope["high"],
                "ope_abs_error": abs(ope["estimate"] - realised),
                "replay_abs_error": abs(ope["replay_accept"] - realised),
                "interval": [ope["low"], ope["high"]],
                "window_interval": list(window),
            }
        )
    return out
