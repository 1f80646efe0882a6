"""The shadow stage's gate: are the candidate's weights surely worse than the served ones on a
class of live traffic?

A release's shadow stage (``rl_loop.release_stage``) has the candidate's replicas answer users'
requests off their path; the loop verifies those answers. Before the candidate arm takes any
request, this compares, per evidence class (``refit.class_tags``), the candidate's verified
shadow answers of the stage against the served weights' local evidence as the live routing
state holds it (``LearnedState.classes``: their users' verdicts, shadows and gate answers):

    fails  when candidate's Wilson upper bound < served's Wilson lower bound, both at
           z(1 - alpha / (2 k)) for the k classes compared (Bonferroni), with at least
           ``min_answers`` candidate answers in the class

A failing class rolls the release back before any user is exposed (decided by the loop, the
class and both intervals in the change log). Why here and not only in the gateway's test: the
candidate's routing is refitted on the same shadow answers, so it keeps a class the weights
regressed on at the frontier, and the users' verdicts would never show the regression; the
served weights would be replaced by worse ones that routing merely hides.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from statistics import NormalDist

from rl_loop.outcomes import VerdictCache, row_outcomes
from router.calibration import wilson_bounds
from router.learned import LearnedState
from traffic.store import InferenceFilter, StoreBackend

ALPHA = 0.05  # the family-wise error of the classes compared
MIN_ANSWERS = 20  # candidate answers a class needs before it can fail


async def shadow_regressions(
    store: StoreBackend,
    since: datetime,
    candidate: str,
    live: LearnedState,
    *,
    class_tags: list[str],
    local_target: str,
    frontier_prefix: str,
    cache: VerdictCache,
    alpha: float = ALPHA,
    min_answers: int = MIN_ANSWERS,
) -> dict[str, dict[str, object]]:
    """The classes the candidate's weights regressed on (module docstring), each with both
    sides' counts and bounds; empty when none. ``cache``: the shadows' verdicts (the refit
    verified them)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # accepted, answered
    async for row in store.iter_inferences(InferenceFilter(since=since), with_shadows=True):
        for outcome in row_outcomes(
            row,
            class_tags=class_tags,
            local_target=local_target,
            frontier_prefix=frontier_prefix,
            cache=cache,
        ):
            if outcome.source == "shadow" and outcome.weights_version == candidate:
                counts[outcome.class_key][0] += outcome.accepted
                counts[outcome.class_key][1] += 1
    compared = {
        key: c for key, c in counts.items() if c[1] >= min_answers and live.counts(key, "local").n
    }
    if not compared:
        return {}
    z = NormalDist().inv_cdf(1 - alpha / (2 * len(compared)))
    out: dict[str, dict[str, object]] = {}
    for key, (accepted, answered) in sorted(compared.items()):
        served = live.counts(key, "local")
        cand_low, cand_high = wilson_bounds(accepted / answered, answered, z)
        live_low, live_high = wilson_bounds(served.accepted / served.n, served.n, z)
        if cand_high < live_low:
            out[key] = {
                "candidate": {"accepted": accepted, "answers": answered},
                "candidate_bounds": [round(cand_low, 4), round(cand_high, 4)],
                "served": {"accepted": served.accepted, "answers": served.n},
                "served_bounds": [round(live_low, 4), round(live_high, 4)],
            }
    return out
