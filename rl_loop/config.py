"""Configuration of the RL loop: every knob, documented and defined once, apart from the code
that uses it (`rl_loop/train.py` and the rest read these values; presets and YAML override them,
never restate them).

Groups, in the loop's order: ``data`` (which recorded traffic becomes which dataset), ``rl``
(on-policy RL on the served model's own samples), ``sft`` (supervised fine-tuning /
distillation on accepted answers), ``dpo`` (preference training on the record's pairs),
``engine`` (precision, memory savers, LoRA), ``gate`` (the evaluation that accepts or rejects a
candidate), ``refit`` (the learned routing policy refitted after a promotion). ``LoopConfig``
holds them all plus the device and the MoE experts' kernels. Unknown keys are errors; an invalid
combination raises an error naming what to set.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from serving.names import LOCAL_MODEL_NAME
from serving.training import DEFAULT_EXPERTS_IMPLEMENTATION, ExpertsImplementation

# How far back a round reads the record for evidence (the refit's outcomes, the agent episodes):
# a month of traffic, not the whole record, which a long-running gateway grows without bound.
DEFAULT_EVIDENCE_WINDOW_DAYS = 30.0


def window_start(end: datetime, window_days: float | None) -> datetime | None:
    """The start of a ``window_days`` window ending at ``end`` (None: no start)."""
    return None if window_days is None else end - timedelta(days=window_days)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DataConfig(_Strict):
    """How the traffic record becomes datasets (through ``traffic.export``)."""

    eval_fraction: float = Field(
        default=0.15,
        ge=0.0,
        lt=1.0,
        description="Latest share of episodes held out of training (the time split).",
    )
    frontier_prefix: str = Field(
        default="frontier", description="Route targets starting with this are frontier answers."
    )
    near_dedup: bool = Field(
        default=False, description="MinHash near-duplicate removal (exact dedup is always on)."
    )
    scrub_pii: bool = Field(default=True, description="Scrub PII from exported texts.")
    max_prompt_tokens: int = Field(
        default=320, ge=16, description="Longer prompts are left out of SFT (compute budget)."
    )
    max_completion_tokens: int = Field(
        default=96, ge=4, description="Longer answers are left out of SFT (compute budget)."
    )


class SftConfig(_Strict):
    """Supervised fine-tuning on accepted answers (frontier distillation, edits, own accepts)."""

    steps: int = Field(default=600, ge=0, description="Optimizer steps per round (0: no SFT).")
    max_epochs: float = Field(
        default=12.0,
        gt=0,
        description="Fewer steps when the data is small: at most this many passes over it (a "
        "few hundred examples are memorised long before `steps`).",
    )
    batch_size: int = Field(default=16, ge=1, description="Examples per step.")
    lr: float = Field(default=3e-3, gt=0, description="Peak learning rate (AdamW).")
    warmup_steps: int = Field(default=20, ge=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="Final lr / peak lr.")
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float = Field(default=1.0, gt=0, description="Max global gradient norm.")
    replay_windows: int = Field(
        default=8,
        ge=0,
        description="Windows of the base-training code corpus per step, trained with the "
        "plain LM loss beside the answers: without them the model forgets general code (the "
        "gate's perplexity check rejects it).",
    )
    replay_weight: float = Field(default=1.0, ge=0, description="Weight of that LM loss.")
    replay_seq_len: int = Field(default=64, ge=8, description="Tokens per replay window.")
    per_example_mean: bool = Field(
        default=True,
        description="Average the loss per example first, so one-word answers weigh as much as "
        "long code answers; else per token.",
    )


class RlConfig(_Strict):
    """On-policy RL: rollouts from the served replicas, rewards, truncated IS, KL to the model
    being served."""

    enabled: bool = Field(default=True, description="Run the RL phase when rollouts are given.")
    prompts: int = Field(default=24, ge=1, description="Prompts sampled per round.")
    samples_per_prompt: int = Field(
        default=4, ge=2, description="Completions per prompt (the group of the baseline)."
    )
    temperature: float = Field(default=1.0, gt=0, description="Rollout sampling temperature.")
    max_new_tokens: int = Field(default=96, ge=1, description="Rollout completion cap.")
    steps: int = Field(default=8, ge=0, description="Optimizer steps over the rollouts.")
    batch_size: int = Field(default=16, ge=1, description="Completions per RL step.")
    lr: float = Field(default=2e-4, gt=0)
    kl_coef: float = Field(
        default=0.05, ge=0, description="beta of the per-token KL to the current served model."
    )
    is_cap: float = Field(
        default=2.0, gt=0, description="C of the truncated IS weight min(pi_train/pi_rollout, C)."
    )
    grad_clip: float = Field(default=1.0, gt=0)
    reward_accepted: float = Field(default=0.75, description="Reward of a verified answer.")
    reward_rejected: float = Field(default=-0.25, description="Reward of a failed answer.")
    degenerate_penalty: float = Field(
        default=-0.25, le=0, description="Added for empty, echoed or repetitive answers."
    )
    concurrency: int = Field(default=8, ge=1, description="Rollout requests in flight.")
    hint_weight: float = Field(
        default=0.0,
        ge=0,
        description="Weight of hint-conditioned self-distillation on rejected rollouts (the "
        "verifier's feedback as the hint; 0: off).",
    )
    distill_weight: float = Field(
        default=0.0,
        ge=0,
        description="lambda of on-policy distillation: the teacher's logprob minus the "
        "policy's, per token, added to the advantage (rollouts a teacher scored; 0: off).",
    )
    teacher_url: str | None = Field(
        default=None,
        description="Base URL of a vLLM server whose model (same tokenizer) scores the "
        "rollouts for on-policy distillation.",
    )
    teacher_model: str | None = Field(
        default=None, description="The teacher's served model name (None: the loop's own)."
    )


DpoLossType = Literal["sigmoid", "ipo", "apo_zero", "sppo_hard", "robust", "hinge", "sft"]


class DpoConfig(_Strict):
    """Preference training (DPO) on the record's pairs: an edit over the rejected answer, an
    accepted answer over a rejected one to the same prompt."""

    steps: int = Field(default=0, ge=0, description="Optimizer steps per round (0: no DPO).")
    max_epochs: float = Field(
        default=4.0, gt=0, description="At most this many passes over the pairs."
    )
    min_pairs: int = Field(
        default=8, ge=1, description="Fewer pairs than this: the phase is skipped."
    )
    batch_size: int = Field(default=8, ge=1, description="Pairs per step.")
    lr: float = Field(default=1e-4, gt=0, description="Peak learning rate (AdamW).")
    warmup_steps: int = Field(default=5, ge=0)
    min_lr_ratio: float = Field(default=0.1, ge=0, le=1, description="Final lr / peak lr.")
    beta: float = Field(
        default=0.1, gt=0, description="DPO's beta: how far the policy may move from the reference."
    )
    grad_clip: float = Field(default=1.0, gt=0, description="Max global gradient norm.")
    loss_type: DpoLossType = Field(
        default="sigmoid",
        description="TRL's preference loss: sigmoid (DPO), ipo, apo_zero (pushes the chosen "
        "answer up and the rejected down, each against the reference), sppo_hard, robust, hinge; "
        "sft: only the NLL of the chosen answers (a control).",
    )
    sft_weight: float = Field(
        default=1.0,
        ge=0,
        description="Weight of a negative log-likelihood term on the chosen answers (RPO): the "
        "margin grows without the chosen answer itself becoming less likely. 1 by default: with "
        "on-policy pairs it is what made DPO improve the gate (docs/training.md); 0: plain DPO.",
    )


class LoraConfig(_Strict):
    """LoRA adapters through PEFT: only the adapters train (large models, many GPUs)."""

    r: int = Field(default=16, ge=1, description="Rank of each adapter.")
    alpha: int = Field(default=32, ge=1, description="Scale numerator (scale = alpha / r).")
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: tuple[str, ...] = Field(
        default=("q_proj", "k_proj", "v_proj", "o_proj"),
        description="Modules adapted. Attention only by default: vLLM loads LoRA on a MoE's "
        "experts only on GPUs.",
    )
    save_adapters: bool = Field(
        default=False,
        description="Also save each phase's adapter (for vLLM's --enable-lora on GPUs); the "
        "checkpoint holds the merged weights either way (what the fp8 export and the hot-swap "
        "take).",
    )


class EngineConfig(_Strict):
    """How the trainers run on TRL + accelerate (the processes come from `accelerate launch`)."""

    bf16: bool = Field(default=False, description="bf16 mixed precision (GPUs).")
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass (less memory)."
    )
    lora: LoraConfig | None = Field(
        default=None, description="Train LoRA adapters instead of every weight (None: full)."
    )


class GateConfig(_Strict):
    """When a candidate may replace the served model (all must hold)."""

    max_new_tokens: int = Field(default=96, ge=1, description="Generation cap of the eval.")
    record_eval_per_family: int = Field(
        default=8, ge=0, description="Time-split held-out traffic prompts per family."
    )
    family_tolerance: float = Field(
        default=0.15,
        ge=0,
        le=1,
        description="A family regresses when its accept rate falls by more than this.",
    )
    overall_tolerance: float = Field(
        default=0.02, ge=0, le=1, description="Largest allowed drop of the overall accept rate."
    )
    min_improvement: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="The candidate must beat the current overall accept rate by at least this.",
    )
    max_ppl_ratio: float = Field(
        default=1.25, ge=1, description="Held-out code perplexity may grow by this factor."
    )
    ppl_windows: int = Field(default=16, ge=1, description="Held-out code windows scored.")
    ppl_seq_len: int = Field(default=64, ge=8, description="Tokens per perplexity window.")
    max_hack_share: float = Field(
        default=0.05,
        ge=0,
        le=1,
        description="Largest share of passed answers that are empty, echoed, repetitive or "
        "format-only.",
    )
    max_strict_gap: float = Field(
        default=0.10,
        ge=0,
        le=1,
        description="Largest gap between the verifier's pass rate and the stricter re-check's.",
    )


class RefitConfig(_Strict):
    """Refit of the learned routing policy after a promotion."""

    window_days: float | None = Field(
        default=DEFAULT_EVIDENCE_WINDOW_DAYS,
        gt=0,
        description="Outcomes of the inferences recorded this many days before the refit "
        "(None: the whole record; the rows read are held in memory while the policy is fitted).",
    )

    class_tags: tuple[str, ...] = Field(
        default=("family",),
        description="Tags (or a benchmark's client-side labels) that group outcomes into "
        "evidence classes for reports and for inheriting evidence across a swap; routing "
        "itself reads the request text, never tags.",
    )
    live_mix_requests: int = Field(
        default=2000,
        ge=0,
        description="The latest requests the learned policy decided whose scores are the live "
        "mix the threshold's held-out verdicts are weighted to (router/calibration.py); 0: the "
        "held-out verdicts' own mix.",
    )
    current_version_only: bool = Field(
        default=True,
        description="Count local outcomes only of the weights now served (older weights' "
        "answers say little about the new ones).",
    )
    gate_outcomes: bool = Field(
        default=True,
        description="Count the gate's verified answers of the served weights on held-out items "
        "as local outcomes: unbiased evidence (never trained on) the moment weights change.",
    )
    inherit_indistinguishable: bool = Field(
        default=True,
        description="After a promotion, a class on which the gate cannot tell the new weights "
        "from the replaced ones, except better by noise (same held-out items: at least as "
        "many passed and at most 2 sqrt(discordant) more), keeps the replaced weights' live "
        "and shadow outcomes as evidence. Without it one gate miss in 32 keeps a learned "
        "class's lower bound under the target for a whole round; a clearly better candidate "
        "inherits nothing (the older evidence would understate it).",
    )


class AgentDistillConfig(_Strict):
    """Distillation on the frontier's successful agent episodes, mixed into the round's SFT
    (``rl_loop.agent_data``): each assistant turn of an accepted episode every step of which
    the frontier served, tool calls included."""

    max_examples: int = Field(
        default=0,
        ge=0,
        description="Agent turns added to a round's SFT examples at most, the newest first "
        "(0: none).",
    )
    window_days: float | None = Field(
        default=DEFAULT_EVIDENCE_WINDOW_DAYS,
        gt=0,
        description="Episodes recorded this many days before the round's cut-off (None: the "
        "whole record; the rows read are held in memory while the episodes are rebuilt).",
    )


class ReleaseConfig(_Strict):
    """Step 5 as a release (``rl_loop.release_stage``): the candidate's weights on some replicas
    and the routing fitted for them, as a canary arm the gateway's sequential test decides."""

    enabled: bool = Field(
        default=False,
        description="Release through a canary (needs 2 replicas or more); off: every replica "
        "swaps at once and the refit reloads routing for all traffic.",
    )
    canary_replicas: int = Field(
        default=1, ge=1, description="Replicas that take the candidate's weights first."
    )
    share: float = Field(
        default=0.3, gt=0, lt=1, description="The candidate arm's share in the first stage."
    )
    schedule: tuple[float, ...] = Field(
        default=(1.0,),
        description="The later stages' shares, increasing; 1 promotes (release.auto_promote).",
    )
    poll_s: float = Field(default=2.0, gt=0, description="How often the release's status is read.")
    shadow: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="A shadow stage first (0: none): the candidate's replicas answer this share "
        "of users' requests off their path and its routing is refitted on them before the "
        "candidate arm takes any request (needs the caller's shadow traffic).",
    )


class LoopConfig(_Strict):
    """One round of the loop: datasets -> train -> gate -> promote -> refit."""

    work_dir: Path = Field(description="Datasets, checkpoints and reports go here.")
    device: str = Field(default="cpu", description="torch device of training and evaluation.")
    experts_implementation: ExpertsImplementation = Field(
        default=DEFAULT_EXPERTS_IMPLEMENTATION,
        description="How transformers computes the MoE experts of the models the loop loads: "
        "'eager' (the per-expert loop, fastest on the CPU), 'grouped_mm' or 'batched_mm' "
        "(GPU kernels). Speed only: the checkpoints are the same.",
    )
    threads: int | None = Field(default=None, ge=1, description="torch CPU threads (None: all).")
    seed: int = 0
    served_model_name: str = Field(
        default=LOCAL_MODEL_NAME, description="Model name the replicas serve."
    )
    checkpoint_kind: Literal["ft"] = Field(
        default="ft", description="Version id prefix of the checkpoints the loop writes."
    )
    data: DataConfig = Field(default_factory=DataConfig)
    sft: SftConfig = Field(default_factory=SftConfig)
    rl: RlConfig = Field(default_factory=RlConfig)
    dpo: DpoConfig = Field(default_factory=DpoConfig)
    agent_distill: AgentDistillConfig = Field(default_factory=AgentDistillConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    refit: RefitConfig = Field(default_factory=RefitConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)

    @model_validator(mode="after")
    def _something_to_train(self) -> Self:
        if self.sft.steps == 0 and self.dpo.steps == 0 and not (self.rl.enabled and self.rl.steps):
            raise ValueError(
                "nothing trains: set sft.steps > 0, dpo.steps > 0 or rl.enabled with rl.steps > 0"
            )
        return self
