"""Shapes of the self-hosted Qwen3-MoE and the record written beside each checkpoint.

A `ModelSpec` is everything that decides the architecture; `build.build_model` turns one into a
`transformers.Qwen3MoeConfig` and a randomly initialised model. Two presets exist:

- "tiny" (~3M parameters): 2 layers, 8 experts (top-2) of width 128, hidden 128. Boots in vLLM on
  a 2-core CPU in about a minute and serves hundreds of tokens per second; used by the tests and
  the demo.
- "small" (~25M parameters): 6 layers, 16 experts (top-2) of width 256, hidden 256. Still CPU
  trainable, big enough for base training on code to show a learning curve.

Each checkpoint directory holds a `switchyard_version.json` (`CheckpointVersion`): its version
id, the version it was derived from (`parent`, None for a fresh init), creation time, the spec
and the seed. Checkpoints made by training or export also carry free-form `metadata` (how they
were made), `eval` figures (e.g. held-out perplexity) and a `probe` (`ProbeReference`): the
trainer's own logprobs of a fixed prompt, which a replica serving these weights must reproduce.
All three are optional, so files written before they existed still load.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

PresetName = Literal["tiny", "small"]
VERSION_FILE = "switchyard_version.json"


class ModelSpec(BaseModel):
    """Architecture of a Qwen3-MoE decoder. Field names follow `transformers.Qwen3MoeConfig`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vocab_size: int = Field(default=8192, ge=256, description="Must cover the tokenizer's ids.")
    hidden_size: int = Field(default=128, ge=16)
    num_hidden_layers: int = Field(default=2, ge=1)
    num_attention_heads: int = Field(default=4, ge=1)
    num_key_value_heads: int = Field(default=2, ge=1)
    head_dim: int = Field(default=32, ge=8)
    num_experts: int = Field(default=8, ge=1)
    num_experts_per_tok: int = Field(default=2, ge=1, description="Experts routed per token.")
    moe_intermediate_size: int = Field(default=128, ge=8, description="Width of one expert.")
    intermediate_size: int = Field(
        default=256, ge=8, description="Dense MLP width (only used by `mlp_only_layers`)."
    )
    norm_topk_prob: bool = Field(default=True, description="Renormalise top-k router weights.")
    max_position_embeddings: int = Field(default=4096, ge=128)
    rope_theta: float = Field(default=1_000_000.0, gt=0)
    rms_norm_eps: float = Field(default=1e-6, gt=0)
    initializer_range: float = Field(default=0.02, gt=0)
    tie_word_embeddings: bool = False
    dtype: Literal["bfloat16", "float32"] = Field(
        default="bfloat16",
        description="Dtype of the saved weights (bf16 like Qwen's releases and the vLLM serving "
        "dtype); trainers may upcast when loading.",
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> ModelSpec:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                "num_attention_heads must be a multiple of num_key_value_heads "
                f"(got {self.num_attention_heads} and {self.num_key_value_heads})"
            )
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) must not exceed "
                f"num_experts ({self.num_experts})"
            )
        return self

    @classmethod
    def preset(cls, name: PresetName) -> ModelSpec:
        """The named preset ("tiny" is the default field values)."""
        if name == "tiny":
            return cls()
        return cls(
            hidden_size=256,
            num_hidden_layers=6,
            num_attention_heads=8,
            num_key_value_heads=4,
            head_dim=32,
            num_experts=16,
            moe_intermediate_size=256,
            intermediate_size=512,
        )

    def parameter_count(self) -> int:
        """Total parameters (all experts counted), matching `sum(p.numel())` of the built model."""
        h, d = self.hidden_size, self.head_dim
        attention = h * d * (2 * self.num_attention_heads + 2 * self.num_key_value_heads) + 2 * d
        experts = self.num_experts * 3 * h * self.moe_intermediate_size
        layer = attention + experts + self.num_experts * h + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + embeddings + h


class ProbeReference(BaseModel):
    """Logprobs of a fixed prompt under a checkpoint, computed by the trainer (float32 math).

    `logprobs[i]` is log p(prompt_token_ids[i + 1] | prompt_token_ids[: i + 1]): the same
    quantity vLLM returns as `prompt_logprobs` for position i + 1.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_token_ids: tuple[int, ...] = Field(min_length=2)
    logprobs: tuple[float, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check_lengths(self) -> ProbeReference:
        if len(self.logprobs) != len(self.prompt_token_ids) - 1:
            raise ValueError(
                f"logprobs needs one entry per predicted token: {len(self.prompt_token_ids) - 1} "
                f"for {len(self.prompt_token_ids)} prompt tokens, got {len(self.logprobs)}"
            )
        return self


class CheckpointVersion(BaseModel):
    """Contents of `switchyard_version.json`, the identity of one checkpoint directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version_id: str = Field(description="`<kind>-<12 hex of the weights' digest>`.")
    parent: str | None = Field(description="Version this one was derived from; None if fresh.")
    created_at: datetime
    spec: ModelSpec
    seed: int | None = Field(description="Seed of the random init or of the training run.")
    metadata: dict[str, JsonValue] = Field(
        default_factory=dict, description="How the checkpoint was made (training run, export)."
    )
    eval: dict[str, float] = Field(
        default_factory=dict, description="Evaluation figures, e.g. `held_out_ppl`."
    )
    probe: ProbeReference | None = Field(
        default=None, description="Reference logprobs a replica must reproduce after a swap."
    )
