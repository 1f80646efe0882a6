"""The shadow stage's gate: are the candidate's weights surely worse on a class of live traffic
than the served ones, or than the evidence that admitted them?

A release's shadow stage (``rl_loop.release_stage``) has the candidate's replicas answer users'
requests off their path; the loop verifies those answers. Before the candidate arm takes any
request, this compares, per evidence class (``refit.class_tags``), the candidate's verified
shadow answers of the stage against each *reference*: local evidence as a routing state holds it
(``LearnedState.classes``):

- ``served``: the live state, the served weights' users' verdicts, shadows and gate answers;
- ``gate``: the candidate's own state before the shadow stage, fitted on its gate answers (the
  evidence that admitted it, and that its routing was first fitted on).

    fails  when candidate's Wilson upper bound < the reference's Wilson lower bound, both at
           z(1 - alpha / (2 k)) for the k (class, reference) pairs compared (Bonferroni),
           with at least ``min_answers`` candidate answers in the class

A failing pair rolls the release back before any user is exposed (decided by the loop, the
class, the reference and both intervals in the change log). Why here and not only in the
gateway's test: the candidate's routing is refitted on the same shadow answers, so it keeps a
class the weights regressed on at the frontier, and the users' verdicts would never show the
regression; the served weights would be replaced by worse ones that routing merely hides. Why
the gate too: where the served weights never answered a class locally (a base model), nothing
served can be regressed from, yet live answers far under the gate's say that the gate was
fooled (a held-out set that no longer matches traffic, or a candidate that learnt the gate):
its other verdicts cannot be trusted either.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
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
    references: Mapping[str, LearnedState],
    *,
    class_tags: list[str],
    local_target: str,
    frontier_prefix: str,
    cache: VerdictCache,
    alpha: float = ALPHA,
    min_answers: int = MIN_ANSWERS,
) -> dict[str, dict[str, object]]:
    """The classes the candidate's weights regressed on (module docstring), each with the
    references it fell under, both sides' counts and bounds; empty when none. ``references``:
    name -> routing state (``served``, ``gate``); ``cache``: the shadows' verdicts (the refit
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
    compared = [
        (key, name, state.counts(key, "local"))
        for key, c in sorted(counts.items())
        if c[1] >= min_answers
        for name, state in references.items()
        if state.counts(key, "local").n
    ]
    if not compared:
        return {}
    z = NormalDist().inv_cdf(1 - alpha / (2 * len(compared)))
    out: dict[str, dict[str, object]] = {}
    for key, name, ref in compared:
        accepted, answered = counts[key]
        cand_low, cand_high = wilson_bounds(accepted / answered, answered, z)
        ref_low, ref_high = wilson_bounds(ref.accepted / ref.n, ref.n, z)
        if cand_high < ref_low:
            found = out.setdefault(
                key,
                {
                    "candidate": {"accepted": accepted, "answers": answered},
                    "candidate_bounds": [round(cand_low, 4), round(cand_high, 4)],
                },
            )
            found[name] = {"accepted": ref.accepted, "answers": ref.n}
            found[f"{name}_bounds"] = [round(ref_low, 4), round(ref_high, 4)]
    return out
