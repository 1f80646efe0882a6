"""One turn of the flywheel after traffic was recorded: datasets -> train -> gate -> swap -> refit.

``prepare_candidate`` (steps 1-4, here) then ``rl_loop.ship.ship_candidate`` (steps 5-6) are the
whole loop in order; the driver, ``scripts/flywheel.py``, starts the services, sends traffic and
calls them once per round (a trickle of traffic keeps flowing during the swap):

1. Datasets from the record (``rl_loop.datasets``: SFT on accepted answers, RL prompts, time
   split).
2. The served model is evaluated on the gate's items first; its per-class accept rates choose
   the RL prompts (classes it sometimes passes teach RL the most).
3. Rollouts sampled by the replicas, then RL, SFT and DPO (``rl_loop.train``, on TRL +
   accelerate); the candidate is saved as a new checkpoint with its lineage (the round's
   datasets) and recorded ``candidate``.
4. Gate (``rl_loop.evaluate``): same items, same verifier; report written as JSON and text.
5. Shipping when the gate passed (``rl_loop.ship``): the hot-swap of every replica
   (``rl_loop.promote``), or a release that earns its traffic by evidence
   (``rl_loop.release_stage``); else the candidate is recorded ``rejected``.
6. Refit of the learned routing (``rl_loop.refit``): recorded outcomes plus the gate's
   held-out answers of the weights now served, state file, gateway reload.

Nothing here imports the task families: the verifier arrives as a plain callable.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rl_loop.agent_data import agent_sft_examples
from rl_loop.config import LoopConfig
from rl_loop.datasets import PromptRecord, RoundData, build_round_data, pick_rl_prompts
from rl_loop.evaluate import (
    AnswerCache,
    EvalItem,
    GateReport,
    ModelEval,
    evaluate_policy,
    gate,
)
from rl_loop.model_registry import record_checkpoint, write_trained_on
from rl_loop.modeling import Policy, load_policy, save_checkpoint
from rl_loop.rewards import Verify, combine, degenerate_reward, verifier_reward
from rl_loop.rollouts import Rollout, collect_rollouts, teacher_logprobs
from rl_loop.train import PhaseData, train_candidate
from router.learned import Outcome
from serving.build import read_version
from traffic.store import StoreBackend

# The served checkpoint's held-out agent steps as local outcomes (rl_loop.agent_evidence), given
# the refit's class tags; the flywheel passes its agent gate's (AgentGateRound.step_outcomes).
AgentEvidence = Callable[[Path, Sequence[str]], Awaitable[Sequence[Outcome]]]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Services:
    """Where the running system is: the record, the replicas and the gateway."""

    store: StoreBackend
    replicas: tuple[str, ...]
    gateway_url: str
    admin_token: str
    state_file: Path
    local_target: str = "local"
    #: The whole record where ``store`` is a view leaving the agent episodes out (the flywheel's
    #: chat datasets): the routing refit and the agent distillation read it.
    whole_store: StoreBackend | None = None

    @property
    def record(self) -> StoreBackend:
        return self.whole_store or self.store


@dataclass(slots=True)
class RoundResult:
    round: int
    served_before: str
    candidate: str | None = None
    promoted: bool = False
    served_after: str = ""
    trunk: str | None = None  # the unreleased candidate training continued from, if any
    data: dict[str, int] = field(default_factory=dict)
    rl: dict[str, Any] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    dpo: dict[str, Any] = field(default_factory=dict)
    gate: dict[str, Any] = field(default_factory=dict)
    swap: dict[str, Any] = field(default_factory=dict)
    refit: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def gate_items(
    heldout: Sequence[EvalItem], data: RoundData, per_class: int, class_tag: str = "family"
) -> list[EvalItem]:
    """The supplied held-out items plus up to ``per_class`` time-split recorded prompts."""
    taken: dict[str, int] = defaultdict(int)
    items = list(heldout)
    for record in data.prompts_eval:
        key = record.tags.get(class_tag, "*")
        if taken[key] < per_class:
            taken[key] += 1
            items.append(EvalItem(record.prompt, record.tags, "record", record.tools))
    return items


async def rollouts_for(
    policy: Policy,
    records: Sequence[PromptRecord],
    services: Services,
    config: LoopConfig,
    verify: Verify,
    seed: int,
) -> list[Rollout]:
    """Sample the served model on ``records`` and score each completion (rewards.py)."""
    rl = config.rl
    samples = await collect_rollouts(
        services.replicas,
        config.served_model_name,
        policy,
        records,
        samples_per_prompt=rl.samples_per_prompt,
        temperature=rl.temperature,
        max_tokens=rl.max_new_tokens,
        concurrency=rl.concurrency,
        seed=seed,
    )
    texts = [s.text for s in samples]
    prompts = ["\n".join(str(m.get("content") or "") for m in s.record.prompt) for s in samples]
    rewards = combine(
        [(verifier_reward, 1.0), (degenerate_reward, 1.0)],
        texts,
        tags=[s.record.tags for s in samples],
        verify=verify,
        accepted=rl.reward_accepted,
        rejected=rl.reward_rejected,
        prompts=prompts,
        penalty=rl.degenerate_penalty,
    )
    taught: list[tuple[float, ...] | None] = [None] * len(samples)
    if rl.distill_weight > 0 and rl.teacher_url is not None:
        model = rl.teacher_model or config.served_model_name
        taught = list(await teacher_logprobs(rl.teacher_url, model, samples))
    out = []
    for s, reward, teacher in zip(samples, rewards, taught, strict=True):
        if not s.completion_ids:
            continue
        hint_ids = None
        if rl.hint_weight > 0 and reward < 0:
            passed, feedback = verify(s.record.tags, s.text)
            if not passed and feedback:
                hint_ids = policy.encode_prompt(
                    with_hint(s.record.prompt, feedback), s.record.tools
                )
        out.append(
            Rollout(
                s.prompt_ids, s.completion_ids, s.logprobs, s.record.id, reward, hint_ids, teacher
            )
        )
    return out


def with_hint(prompt: Sequence[Mapping[str, Any]], feedback: str) -> list[dict[str, Any]]:
    """``prompt`` with the verifier's feedback on an earlier attempt added to its last user
    message (the teacher's context in hint-conditioned self-distillation)."""
    messages = [dict(m) for m in prompt]
    last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
    note = f"\n\nHint (a check of an earlier attempt said): {feedback}"
    messages[last]["content"] = str(messages[last].get("content") or "") + note
    return messages


@dataclass(slots=True)
class Candidate:
    """A trained and gated candidate, not yet shipped."""

    result: RoundResult
    served_dir: Path
    candidate_dir: Path
    passed: bool
    current_eval: ModelEval
    candidate_eval: ModelEval


async def prepare_candidate(
    round_index: int,
    served_dir: Path,
    services: Services,
    config: LoopConfig,
    *,
    verify: Verify,
    strict_verify: Verify | None,
    heldout: Sequence[EvalItem],
    answers: AnswerCache | None = None,
    trunk_dir: Path | None = None,
) -> Candidate:
    """Steps 1-4: datasets, current model's eval, RL, SFT, candidate saved and gated.

    ``trunk_dir``: the checkpoint training continues from when it is not the served one (a
    gated candidate whose release ran out of traffic undecided: no evidence against it, and
    restarting from the served weights would throw its training away; the gate still judges
    the new candidate against the served weights). RL is skipped then: the replicas serve
    the served weights, so their samples would be off-policy for the trunk."""
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    out = config.work_dir / f"round-{round_index}"
    out.mkdir(parents=True, exist_ok=True)
    served = read_version(served_dir).version_id
    result = RoundResult(round_index, served, served_after=served)
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        result.seconds[name] = round(now - clock, 1)
        logger.info("round %d: %s done in %.1fs", round_index, name, now - clock)
        clock = now

    data = await build_round_data(services.store, config.data, pairs=config.dpo.steps > 0)
    agent = await agent_sft_examples(
        services.record,
        config.agent_distill,
        config.data,
        local_target=services.local_target,
        work_dir=out,
    )
    result.data = {**data.counts(), "withheld_rows": data.withheld_rows(), **agent.counts}
    lap("datasets")

    # Loading, evaluating and training are CPU/GPU-bound and long: each phase runs in a worker
    # thread so the event loop (store reads, HTTP to the replicas, a caller's other tasks) stays
    # live.
    items = gate_items(heldout, data, config.gate.record_eval_per_family)

    def judge(checkpoint: Path, version: str) -> tuple[Policy, ModelEval]:
        """Load ``checkpoint`` and answer the gate's items with it."""
        model = load_policy(checkpoint, config.device, config.experts_implementation)
        evaluation = evaluate_policy(
            model, version, items, verify, config.gate, strict_verify, cache=answers
        )
        return model, evaluation

    policy, current = await asyncio.to_thread(judge, served_dir, served)
    if trunk_dir is not None:
        result.trunk = read_version(trunk_dir).version_id
        policy = await asyncio.to_thread(
            load_policy, trunk_dir, config.device, config.experts_implementation
        )
    lap("eval_current")

    rl = config.rl
    rollouts: list[Rollout] = []
    if trunk_dir is not None:
        result.rl = {"skipped": "training continues from an unreleased candidate (trunk_dir)"}
    elif rl.enabled and rl.steps > 0 and services.replicas:
        rates = current.class_rates()
        records = pick_rl_prompts(data.prompts_train, rl.prompts, rates, seed=round_index)
        if any(0.0 < r < 1.0 for r in rates.values()) and records:
            rollouts = await rollouts_for(policy, records, services, config, verify, round_index)
        else:
            result.rl = {"skipped": "no class is partly solved: every group would be uniform"}
    lap("rollouts")

    phases = PhaseData(
        rollouts=rollouts,
        sft=[*data.sft_train, *agent.examples],
        pairs=data.pairs_train,
        datasets=[*data.datasets, *([agent.dataset] if agent.dataset else [])],
    )
    policy, stats = await asyncio.to_thread(
        train_candidate, policy, phases, config, out / "train", round_index
    )
    for name, figures in stats.items():
        setattr(result, name, figures.to_json())
    lap("train")

    metadata: dict[str, Any] = {
        "kind": "flywheel-round",
        "round": round_index,
        "data": result.data,
        "rl": result.rl,
        "sft": result.sft,
        "dpo": result.dpo,
        "torch": torch.__version__,
    }
    candidate_dir = await asyncio.to_thread(
        save_checkpoint,
        policy,
        config.work_dir / "checkpoints",
        kind=config.checkpoint_kind,
        seed=config.seed,
        metadata=json.loads(json.dumps(metadata)),
    )
    result.candidate = read_version(candidate_dir).version_id
    await asyncio.to_thread(write_trained_on, candidate_dir, phases.datasets)
    await record_checkpoint(services.store, candidate_dir, "candidate")
    lap("save")

    # The gate judges the weights as saved (bf16, what the replicas will serve), not the
    # float32 ones in memory.
    del policy
    _, cand_eval = await asyncio.to_thread(judge, candidate_dir, result.candidate)
    report = gate(current, cand_eval, config.gate)
    _write_gate(out, report, current, cand_eval)
    result.gate = {
        "passed": report.passed,
        "reasons": report.reasons,
        "current": report.current,
        "candidate": report.candidate,
    }
    lap("eval_candidate")
    return Candidate(result, served_dir, candidate_dir, report.passed, current, cand_eval)


def _write_gate(out: Path, report: GateReport, current: ModelEval, candidate: ModelEval) -> None:
    payload = report.to_json()
    payload["items"] = {
        "current": [_item(i) for i in current.items],
        "candidate": [_item(i) for i in candidate.items],
    }
    (out / "gate.json").write_text(json.dumps(payload, indent=2))
    (out / "gate.txt").write_text(report.to_text() + "\n")


def _item(item: Any) -> dict[str, Any]:
    return {
        "family": item.family,
        "source": item.source,
        "passed": item.passed,
        "strict": item.strict_passed,
        "flags": list(item.flags),
        "answer": item.answer[:300],
    }
