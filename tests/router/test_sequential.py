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


def test_the_difference_holds_at_every_step_at_once_and_narrows_faster_than_two_arms() -> None:
    rng = random.Random(7)
    runs, steps, share, p_c, p_l = 200, 1000, 0.3, 0.85, 0.9
    missed, widths, arm_widths = 0, [], []
    for _ in range(runs):
        test = ReleaseTest(share=share)
        ever = False
        for _ in range(steps):
            candidate = rng.random() < share
            test.add(candidate, rng.random() < (p_c if candidate else p_l))
            low, high = test.bounds()
            ever |= not low <= p_c - p_l <= high
        missed += ever
        widths.append(test.bounds()[1] - test.bounds()[0])
        (c_lo, c_hi), (l_lo, l_hi) = test.candidate.interval(), test.live.interval()
        arm_widths.append((c_hi - l_lo) - (c_lo - l_hi))
    assert missed / runs <= 0.05
    # the augmented term's one sequence against the two arms' sequences differenced
    assert sorted(widths)[runs // 2] < 0.8 * sorted(arm_widths)[runs // 2]
    empty = ReleaseTest(share=0.5)
    assert empty.bounds() == (-1.0, 1.0) and empty.decide() == "continue"
    with pytest.raises(ValueError, match="share"):
        ReleaseTest(share=1.0)


def _median_n(tests: list[ReleaseTest]) -> int:
    return sorted(t.n for t in tests)[len(tests) // 2]


def test_an_a_to_a_release_is_promoted_within_the_quick_flywheels_traffic() -> None:
    # a release of 1,000 tasks at share 0.3 sees about 300-600 differing verdicts
    rng = random.Random(17)
    tests = [_release(rng, 0.9, 0.9, 0.3) for _ in range(100)]
    assert all(t.decide() == "promote" for t in tests)
    assert _median_n(tests) < 750  # 662 here; the two arms' sequences needed 1,175


def _sliced(
    rng: random.Random, p_candidate: float, p_live: float, floor: float | None, local: float = 1.0
) -> ReleaseTest:
    """A release of weights at share 0.3: ``local`` of the candidate's differing answers are
    its local ones (accepted at ``p_candidate``), the rest frontier answers as good as live's."""
    test = ReleaseTest(share=0.3, floor=floor)
    while test.decide() == "continue":
        candidate = rng.random() < 0.3
        at_local = candidate and rng.random() < local
        accepted = rng.random() < (p_candidate if at_local else p_live)
        test.add(candidate, accepted, "plain" if at_local else None)
    return test


def test_a_candidate_bad_on_one_slice_is_caught_by_its_local_floor_sooner() -> None:
    # live accepts 0.95; 40% of the candidate's differing answers are local and accepted at 0.7
    # (it fails one family of three): the pooled loss is 0.1, the margin itself
    rng = random.Random(11)
    floored = [_sliced(rng, 0.70, 0.95, 0.85, local=0.4) for _ in range(100)]
    pooled = [_sliced(rng, 0.70, 0.95, None, local=0.4) for _ in range(100)]
    assert all(t.decide() == "rollback" and t.under_floor() == "plain" for t in floored)
    assert _median_n(floored) < 0.5 * _median_n(pooled)  # 1,085 against 4,000 here
    # without the floor, the pooled difference cannot tell: almost every one runs to the timeout
    assert sum(t.n >= t.max_n for t in pooled) >= 90


def test_a_to_a_releases_above_the_floor_are_not_rolled_back_by_it() -> None:
    rng = random.Random(13)
    decided = [_sliced(rng, 0.88, 0.88, 0.85).decide() for _ in range(100)]
    assert decided.count("rollback") <= 5
