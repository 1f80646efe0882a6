"""Consent in the dataset builders: which recorded rows may become training data, and how.

Each inference carries the ``training_use`` of its caller when it was recorded (the key's, else
its team's, else the gateway's default: ``gateway.auth.consent``). Every builder of training
data (``dataset``: SFT, preference pairs, RL prompts, in memory or as files; ``episode_export``:
agent episodes) asks a :class:`ConsentTally` before it reads a row's text:

- ``allow``: the row enters as the dataset's settings say (``scrub_pii``);
- ``redact``: it enters only scrubbed by :mod:`traffic.scrub` (``traffic.export.pii``), whatever
  ``scrub_pii`` says: every text a record can hold (messages, tool-call arguments, the answer,
  edits and demonstrations, tag values, an episode's tool results and verdict reason);
- ``deny``: it never enters, and is not even parsed;
- not stamped (recorded before migration 9): as the dataset's ``unstamped_training_use`` says
  (``allow`` by default: what those rows were open to before consent existed);
- a value this code does not know (a newer release's): withheld, as ``deny`` (fails closed).

A record made of several rows takes the strictest of them: an episode with one ``deny`` step
is withheld whole, one with a ``redact`` step is scrubbed whole; a preference pair's rows are
each scrubbed as their own consent says before they are paired.

The manifest counts what was withheld, by reason (``deny``, ``unknown``, ``unstamped``), and
how many rows (or episodes) entered redacted. Readers of rows outside these builders (the RL
loop's routing refit) use :func:`consent_of` and :func:`redacted` themselves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, cast

import traffic.scrub as scrubbing
from traffic.store.records import TRAINING_USES, TrainingUse

Reason = Literal["allow", "redact", "deny", "unknown", "unstamped"]
_STRICTNESS: Final = {"allow": 0, "redact": 1, "deny": 2}


def consent_of(stamped: str | None, unstamped: TrainingUse) -> tuple[TrainingUse, Reason]:
    """The consent a row stamped ``stamped`` enters datasets under, and why."""
    if stamped is None:
        return unstamped, "unstamped"
    if stamped in TRAINING_USES:
        use = cast(TrainingUse, stamped)
        return use, use
    return "deny", "unknown"


def redacted(text: str) -> str:
    """``text`` with every secret and PII span replaced by its placeholder."""
    return scrubbing.scrub(text).text


@dataclass(slots=True)
class ConsentTally:
    """The consent decisions of one dataset build, and their counts for its manifest."""

    unstamped: TrainingUse
    withheld: Counter[str] = field(default_factory=Counter)
    redacted: int = 0

    def admit(self, stamped: Iterable[str | None]) -> TrainingUse | None:
        """The consent a record built from rows stamped ``stamped`` enters under (the
        strictest); None when it is withheld, counted under the reason of its strictest row
        (an explicit ``deny`` first)."""
        decided = [consent_of(s, self.unstamped) for s in stamped]
        if not decided:
            return self.unstamped
        use = max((u for u, _ in decided), key=_STRICTNESS.__getitem__)
        if use != "deny":
            return use
        reasons = {r for u, r in decided if u == "deny"}
        reason = next(r for r in ("deny", "unknown", "unstamped") if r in reasons)
        self.withheld[reason] += 1
        return None

    def counts(self) -> dict[str, int]:
        """What was withheld, by reason, for a manifest."""
        return dict(sorted(self.withheld.items()))
