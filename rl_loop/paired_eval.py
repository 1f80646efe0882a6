"""Two models judged on the same items: the change of the accept rate per class, paired.

Each item is answered by both models (greedy, so each answer is fixed), so what measures the
change is the discordant items: ``gained`` (failed before, passes after) and ``lost`` (the
reverse). The change of the accept rate is ``(gained - lost) / n``; its 95% interval is the
Wald interval of a paired difference of proportions, and ``p`` is the exact two-sided McNemar
test (a binomial test of ``gained`` among the ``gained + lost`` discordant items, p = 1/2).
Unpaired intervals on a few dozen items per class are wider than the effects we look for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rl_loop.evaluate import ItemResult, ModelEval
from router.ope import Z95


@dataclass(frozen=True, slots=True)
class PairedChange:
    """One class's accept rate before and after, on the same ``n`` items."""

    n: int
    before: float
    after: float
    gained: int
    lost: int

    @property
    def delta(self) -> float:
        return (self.gained - self.lost) / self.n if self.n else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        if not self.n:
            return (0.0, 0.0)
        d = self.gained - self.lost
        se = math.sqrt(max(0.0, self.gained + self.lost - d * d / self.n)) / self.n
        return (self.delta - Z95 * se, self.delta + Z95 * se)

    @property
    def p_value(self) -> float:
        """Exact two-sided McNemar p-value."""
        k, m = min(self.gained, self.lost), self.gained + self.lost
        if m == 0:
            return 1.0
        tail: float = sum(math.comb(m, i) for i in range(k + 1)) / 2**m
        return min(1.0, 2 * tail)

    def to_json(self) -> dict[str, float | int | list[float]]:
        return {
            "n": self.n,
            "before": round(self.before, 3),
            "after": round(self.after, 3),
            "delta": round(self.delta, 3),
            "ci95": [round(x, 3) for x in self.ci95],
            "gained": self.gained,
            "lost": self.lost,
            "p": round(self.p_value, 4),
        }

    def to_text(self) -> str:
        low, high = self.ci95
        return (
            f"{self.before:.3f} -> {self.after:.3f} ({self.delta:+.3f}, 95% CI "
            f"[{low:+.3f}, {high:+.3f}], +{self.gained}/-{self.lost}, McNemar p={self.p_value:.3g},"
            f" n={self.n})"
        )


def _change(pairs: list[tuple[ItemResult, ItemResult]]) -> PairedChange:
    n = len(pairs)
    before = sum(b.passed for b, _ in pairs)
    after = sum(a.passed for _, a in pairs)
    gained = sum(a.passed and not b.passed for b, a in pairs)
    lost = sum(b.passed and not a.passed for b, a in pairs)
    return PairedChange(n, before / n if n else 0.0, after / n if n else 0.0, gained, lost)


def paired_changes(before: ModelEval, after: ModelEval) -> dict[str, PairedChange]:
    """Per class (and ``"*overall"``) the paired change from ``before`` to ``after``; both must
    have judged the same items in the same order."""
    if len(before.items) != len(after.items) or any(
        b.tags != a.tags for b, a in zip(before.items, after.items, strict=True)
    ):
        raise ValueError("paired_changes needs both evaluations on the same items, in order")
    pairs = list(zip(before.items, after.items, strict=True))
    out = {
        family: _change([(b, a) for b, a in pairs if b.family == family])
        for family in sorted({b.family for b, _ in pairs})
    }
    out["*overall"] = _change(pairs)
    return out
