"""The flywheel's releases: its settings, the users' traffic a release runs on, and the injected
bad candidate (issue 23's check that a release catches what a gate let through).

    drive      the simulated IDE's traffic at the round's pace until the release ends or its
               ``tasks`` are sent (the loop then rolls it back: fail safe); the client keeps
               its own labels, as in a round. First, when ``shadow`` > 0, the shadow stage's
               ``shadow_tasks``, after which the client's labels are kept and the record
               settled, so that the loop can verify the candidate's shadow answers
    injected   in round ``inject_round``, the round's candidate (trained and gated as usual) is
               replaced by a copy made worse on one learnable family: a few SFT steps on that
               family's prompts with plausible wrong answers (each task's ``wrong_reply``),
               beside the other learnable families' reference answers so that only that family
               suffers. The routing released with it is the one the good candidate's gate
               would fit (the gate fooled: the case a release exists for). Its held-out accept
               per family, against the served model's, is what makes it "known worse".
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from flywheel_tasks import strict_verify, verify  # scripts/ is on the path (flywheel.py)
from flywheel_traffic import Pace, settle, traffic
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from loadtests.ide_client import RunStats
from rl_loop.config import LoopConfig
from rl_loop.datasets import SftExample
from rl_loop.evaluate import AnswerCache, EvalItem, evaluate_policy
from rl_loop.loop import Candidate
from rl_loop.modeling import load_policy, save_checkpoint
from rl_loop.release_stage import Drive, ReleaseTraffic, release_figures
from rl_loop.train import PhaseData, train_candidate
from serving.build import read_version
from tasks.ide import FAMILIES
from traffic.store import StoreBackend

INJECT_SEED_START = 3_000_000  # training-split task seeds no round draws
SHADOW_SEEDS = 500  # the shadow stage's task seeds: the release's, shifted past any it draws


class ReleaseWorkload(BaseModel):
    """How the flywheel releases its candidates (``rl_loop.release_stage``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        default=True, description="Release through a canary (needs 2 replicas; else all at once)."
    )
    share: float = Field(
        default=0.3,
        gt=0,
        lt=1,
        description="The candidate arm's first share (the issue's quick 30% -> 100%): the "
        "canary's harm is this share times the arms' accept gap where they differ.",
    )
    schedule: tuple[float, ...] = Field(default=(1.0,), description="Later stages' shares.")
    tasks: int = Field(default=600, ge=1, description="IDE tasks a release may run on at most.")
    margin: float = Field(default=0.1, gt=0, lt=1, description="The test's tolerated loss.")
    shadow: float = Field(
        default=1.0, ge=0, le=1, description="The shadow stage's share (0: no shadow stage)."
    )
    shadow_tasks: int = Field(default=400, ge=1, description="IDE tasks of the shadow stage.")

    def loop_release(self) -> dict[str, Any]:
        """The loop's ``release`` settings (``rl_loop.config.ReleaseConfig``) for this workload."""
        keys = ("enabled", "share", "schedule", "shadow")
        return {k: getattr(self, k) for k in keys}

    inject_round: int | None = Field(
        default=1, ge=0, description="The round whose candidate is made worse (None: none)."
    )
    inject_examples: int = Field(default=48, ge=1, description="Wrong answers taught.")
    inject_steps: int = Field(default=60, ge=1, description="SFT steps of the sabotage.")


def drive_for(
    base: str, oracle: str, budget: int, seed: int, pace: Pace, sent: list[RunStats]
) -> Drive:
    """Users' traffic for one release (module docstring); each batch's stats into ``sent``."""

    async def drive(stop: asyncio.Event) -> None:
        done, k = 0, 0
        while not stop.is_set() and done < budget:
            n = min(pace.batch, budget - done)
            sent.append(await traffic(base, oracle, n, seed * 1000 + k, pace))
            done, k = done + n, k + 1

    return drive


def release_traffic(
    base: str,
    oracle: str,
    workload: ReleaseWorkload,
    seed: int,
    pace: Pace,
    sent: list[RunStats],
    keep: Callable[[RunStats], None],
    store: StoreBackend,
) -> ReleaseTraffic:
    """The users' traffic of one release (module docstring); ``keep``: the client's labels of
    a batch kept (``flywheel_traffic.keep_labels``)."""
    live = drive_for(base, oracle, workload.tasks, seed, pace, sent)
    if workload.shadow <= 0:
        return ReleaseTraffic(live)

    async def shadow(stop: asyncio.Event) -> None:
        since, batches = datetime.now(UTC), len(sent)
        budget = workload.shadow_tasks
        await drive_for(base, oracle, budget, seed + SHADOW_SEEDS, pace, sent)(stop)
        for stats in sent[batches:]:
            keep(stats)
        await settle(store, since)

    return ReleaseTraffic(live, shadow)


def gate_text(candidate: Candidate) -> str:
    """The round's gate, one log line."""
    res, g = candidate.result, candidate.result.gate
    verdict = "passed" if g["passed"] else "rejected"
    accept = f"{g['current']['accept_rate']:.3f} -> {g['candidate']['accept_rate']:.3f}"
    trunk = f" (trained from {res.trunk})" if res.trunk else ""
    why = "; ".join(g["reasons"])
    return f"round {res.round} candidate {res.candidate}{trunk}: gate {verdict} ({accept}) {why}"


def next_trunk(
    trunk: Path | None, candidate: Candidate, promoted: bool, injected: bool
) -> Path | None:
    """Where the next round's training starts when not from the served weights
    (``rl_loop.loop.prepare_candidate``'s ``trunk_dir``): the round's candidate when the gate
    passed it and its release ran out of traffic undecided (no evidence either way); the
    trunk as it was when the release was rolled back on evidence, the candidate rejected or
    injected (made worse on purpose); none once a candidate is promoted (the served weights
    are the newest)."""
    if promoted:
        return None
    if injected:
        return trunk
    release = candidate.result.swap.get("release") or {}
    if (
        candidate.passed
        and release.get("timed_out")
        and not release.get("shadow", {}).get("regressions")
    ):
        return candidate.candidate_dir
    return trunk


def sabotage_family(learnable: list[str]) -> str:
    """The family the injected candidate is made worse on: the first learnable one."""
    return sorted(learnable)[0]


def _examples(family: str, learnable: list[str], n: int) -> list[SftExample]:
    out = []
    for i in range(n):
        for name in learnable:
            task = FAMILIES[name].generate(INJECT_SEED_START + 7919 * i + 3)
            answer = task.wrong_reply if name == family else task.reference_reply
            out.append(SftExample(task.messages(), answer))
    return out


def injected_candidate(
    candidate: Candidate,
    family: str,
    learnable: list[str],
    config: LoopConfig,
    workload: ReleaseWorkload,
    heldout: list[EvalItem],
    answers: AnswerCache,
) -> tuple[Candidate, dict[str, Any]]:
    """The round's candidate made worse on ``family`` (module docstring), saved as a new
    checkpoint; returns it (gate bypassed) and its held-out accept per family against the
    served model's (blocking: call in a worker thread)."""
    work = config.work_dir / f"round-{candidate.result.round}" / "injected"
    policy = load_policy(candidate.candidate_dir, config.device, config.experts_implementation)
    sft = config.sft.model_copy(
        update={"steps": workload.inject_steps, "replay_windows": 0, "max_epochs": 1000.0}
    )
    rl = config.rl.model_copy(update={"enabled": False})
    dpo = config.dpo.model_copy(update={"steps": 0})
    run = config.model_copy(update={"sft": sft, "rl": rl, "dpo": dpo})
    data = PhaseData(sft=_examples(family, learnable, workload.inject_examples))
    policy, _ = train_candidate(policy, data, run, work / "train", config.seed)
    metadata: dict[str, JsonValue] = {
        "kind": "injected-bad",
        "family": family,
        "from": candidate.result.candidate,
    }
    bad_dir = save_checkpoint(
        policy, config.work_dir / "checkpoints", kind=config.checkpoint_kind,
        seed=config.seed, metadata=metadata,
    )  # fmt: skip
    del policy
    bad = read_version(bad_dir).version_id
    items = [i for i in heldout if i.tags.get("family") in learnable]
    evaluated = {}
    for name, path in (("served", candidate.served_dir), ("injected", bad_dir)):
        model = load_policy(path, config.device, config.experts_implementation)
        version = read_version(path).version_id
        found = evaluate_policy(
            model, version, items, verify, config.gate, strict_verify, cache=answers
        )
        evaluated[name] = found.class_rates()
    candidate.result.candidate = bad
    known = {"family": family, "checkpoint": bad, "heldout_accept": evaluated}
    return dataclasses.replace(candidate, candidate_dir=Path(bad_dir), passed=True), known


async def release_record(
    store: StoreBackend,
    since: datetime,
    round_index: int,
    outcome: dict[str, Any],
    injected: dict[str, Any],
    sent: list[RunStats],
) -> dict[str, Any]:
    """The round's release as the report keeps it (rl_loop.report.release_targets): what
    decided it, each arm's verdicts and the canary's harm read back from the record, the
    users' traffic it ran on, and the injected candidate's evidence where there was one."""
    figures = await release_figures(store, since, outcome["release_id"], "local")
    return {
        "round": round_index,
        "status": outcome["status"],
        "decided_by": outcome["decided_by"],
        "timed_out": outcome["timed_out"],
        "decision": outcome["decision"],
        "shadow": outcome.get("shadow") or None,
        "seconds": outcome["seconds"],
        "injected": injected or None,
        "figures": figures,
        "traffic": {
            "tasks": sum(x.total().sent for x in sent),
            "failed": sum(x.total().errors for x in sent),
        },
    }
