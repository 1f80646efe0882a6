"""The release's sequential test: its confidence sequences hold at every step at once, an A/A
release is rarely rolled back, and a worse candidate is rolled back every time (simulated
verdicts; fixed seeds)."""

from __future__ import annotations

import random

import pytest

from router.sequential import Arm, ReleaseTest


def test_an_arms_interval_holds_at_every_step_at_once() -> None:
    rng = random.Random(3)
    runs, steps, p = 200, 1500, 0.9
    missed = 0
    for _ in range(runs):
        arm = Arm(alpha=0.05)
        ever = False
        for _ in range(steps):
            arm.add(rng.random() < p)
            low, high = arm.interval()
            ever |= not low <= p <= high
        missed += ever
    assert missed / runs <= 0.05  # time-uniform: a miss at any of the 1500 looks counts
    low, high = arm.interval()
    assert high - low < 0.07  # and it narrows with the verdicts (0.061 wide at 1500 here)


def _release(rng: random.Random, p_candidate: float, p_live: float, share: float) -> ReleaseTest:
    test = ReleaseTest(share=share)
    while test.decide() == "continue":
        candidate = rng.random() < share
        test.add(candidate, rng.random() < (p_candidate if candidate else p_live))
    return test


@pytest.mark.parametrize("share", [0.3, 0.5])
def test_a_to_a_releases_are_promoted_and_rarely_rolled_back(share: float) -> None:
    rng = random.Random(17)
    decided = [_release(rng, 0.9, 0.9, share).decide() for _ in range(100)]
    assert decided.count("rollback") <= 5  # false rollbacks <= 5%


def test_a_candidate_worse_by_more_than_the_margin_is_always_rolled_back() -> None:
    rng = random.Random(5)
    tests = [_release(rng, 0.65, 0.9, 0.3) for _ in range(100)]
    assert all(t.decide() == "rollback" for t in tests)
    # before the timeout, by evidence: its upper bound fell under -margin
    assert sum(t.n < t.max_n for t in tests) >= 95


def test_the_interval_is_the_difference_of_the_arms() -> None:
    test = ReleaseTest(share=0.5)
    assert test.bounds() == (-1.0, 1.0) and test.decide() == "continue"
    for i in range(50):
        test.add(True, i % 10 != 0)
        test.add(False, True)
    (c_lo, c_hi), (l_lo, l_hi) = test.candidate.interval(), test.live.interval()
    assert test.bounds() == pytest.approx((c_lo - l_hi, c_hi - l_lo))
    with pytest.raises(ValueError, match="share"):
        ReleaseTest(share=1.0)


def _sliced(
    rng: random.Random, p_candidate: float, p_live: float, floor: float | None
) -> ReleaseTest:
    """A release of weights at share 0.3 whose differing requests are all local answers."""
    test = ReleaseTest(share=0.3, floor=floor)
    while test.decide() == "continue":
        candidate = rng.random() < 0.3
        accepted = rng.random() < (p_candidate if candidate else p_live)
        test.add(candidate, accepted, "plain")
    return test


def test_a_candidate_bad_on_one_slice_is_caught_by_its_local_floor_sooner() -> None:
    # live accepts 0.95 of local answers; the candidate fails one family of three (0.95 -> 0.2)
    rng = random.Random(11)
    floored = [_sliced(rng, 0.70, 0.95, 0.85) for _ in range(100)]
    pooled = [_sliced(rng, 0.70, 0.95, None) for _ in range(100)]
    assert all(t.decide() == "rollback" for t in floored + pooled)
    assert all(t.under_floor() == "plain" for t in floored)
    median = sorted(t.n for t in floored)[50]
    assert median < sorted(t.n for t in pooled)[50]  # 483 against 685 differing verdicts here


def test_a_to_a_releases_above_the_floor_are_not_rolled_back_by_it() -> None:
    rng = random.Random(13)
    decided = [_sliced(rng, 0.88, 0.88, 0.85).decide() for _ in range(100)]
    assert decided.count("rollback") <= 5
