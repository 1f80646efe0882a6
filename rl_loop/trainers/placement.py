"""Where a training process puts a model before its trainer wraps it, and how a sharded run's
weights come back whole. ``accelerate launch`` tells every process which engine runs
(``ACCELERATE_USE_FSDP``, ``FSDP_CPU_RAM_EFFICIENT_LOADING``, ``ACCELERATE_USE_DEEPSPEED``);
transformers and accelerate read the same variables.

Loading (:func:`load_model`):

- No sharding (one process, DDP): the checkpoint on this process's device, in float32 when it is
  trained in full (the optimizer's master weights are the model's own), in bf16 when it is
  frozen (the reference, a LoRA base) and ``engine.bf16`` is set. A checkpoint is stored in
  bf16, so a frozen copy in bf16 holds exactly its values.
- FSDP: in bf16 under ``engine.bf16`` (accelerate upcasts the trained parameters to float32
  master shards itself), on the CPU, never moved to a GPU: ``fully_shard`` places each shard.
  With CPU-RAM-efficient loading only local rank 0 reads the weights; the other ranks hold a
  skeleton on ``meta`` (buffers real: the rotary tables are not in the checkpoint) and receive
  every parameter from rank 0 when the model is sharded (``fsdp2_load_full_state_dict``).
  transformers' own loader would give them zeros (``_move_missing_keys_from_meta_to_device``).
- DeepSpeed ZeRO-3: in bf16 on the CPU, partitioned over the ranks while it loads (zero.Init),
  made current as ``TrainingArguments`` makes it, so even the first load is never whole.

Reference models (:func:`prepare_frozen`): under FSDP2 accelerate's ``fsdp2_prepare_model``, one
shard unit per decoder layer and rank 0's weights broadcast, the policy's own path. TRL's
``prepare_fsdp`` shards only the root module and broadcasts nothing: with rank-0-only loading the
other ranks' shards would stay zeros and the KL and DPO references be silently wrong.

Saving (:func:`gathered_model`): every rank gathers a ZeRO-3 model one parameter at a time, then
the main rank alone saves and probes with ZeRO-3's partitioned init off (:func:`zero3_init_off`),
which would otherwise make its ``from_pretrained`` a collective that the other ranks never join.
:func:`parameter_digests` is what the checks compare across ranks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from accelerate import init_empty_weights
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

from serving.training import DEFAULT_EXPERTS_IMPLEMENTATION, ExpertsImplementation

Sharding = Literal["none", "fsdp", "deepspeed"]


def _flag(environ: Mapping[str, str], name: str) -> bool:
    return environ.get(name, "false").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, slots=True)
class Placement:
    """How this process loads a model (see the module docstring)."""

    sharding: Sharding
    device: str
    bf16: bool
    reads_weights: bool  # False: a meta skeleton that the sharding fills from rank 0

    def dtype(self, *, trained_in_full: bool) -> torch.dtype:
        """bf16 under ``engine.bf16`` unless the model is trained in full without a sharding
        engine (then it holds its own float32 master weights)."""
        if self.bf16 and (self.sharding != "none" or not trained_in_full):
            return torch.bfloat16
        return torch.float32


def placement_from_env(
    device: str, bf16: bool, environ: Mapping[str, str] | None = None
) -> Placement:
    """This process's placement from the variables ``accelerate launch`` sets."""
    env = os.environ if environ is None else environ
    if _flag(env, "ACCELERATE_USE_DEEPSPEED"):
        return Placement("deepspeed", device, bf16, reads_weights=True)
    if _flag(env, "ACCELERATE_USE_FSDP"):
        local_rank = int(env.get("LOCAL_RANK", "0"))
        rank_zero_only = _flag(env, "FSDP_CPU_RAM_EFFICIENT_LOADING")
        return Placement("fsdp", device, bf16, reads_weights=local_rank == 0 or not rank_zero_only)
    return Placement("none", device, bf16, reads_weights=True)


@contextmanager
def _zero3_partitioned_init(bf16: bool) -> Iterator[None]:
    """``from_pretrained`` partitioned while it loads, with the DeepSpeed plugin built as
    ``TrainingArguments.__post_init__`` builds it under ``accelerate launch`` (a no-op when a
    trainer's arguments already made ZeRO-3 current, or ZeRO-3 init is off)."""
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    if is_deepspeed_zero3_enabled():  # type: ignore[no-untyped-call]
        yield
        return
    from accelerate.utils import DeepSpeedPlugin

    plugin = DeepSpeedPlugin()
    if not plugin.is_zero3_init_enabled():
        yield
        return
    plugin.set_mixed_precision("bf16" if bf16 else "no")
    plugin.set_deepspeed_weakref()  # transformers holds it weakly: `plugin` keeps it alive
    yield


def meta_skeleton(
    checkpoint_dir: Path, dtype: torch.dtype, experts_implementation: ExpertsImplementation
) -> PreTrainedModel:
    """The checkpoint's architecture with its parameters on ``meta`` and its buffers real."""
    config = AutoConfig.from_pretrained(str(checkpoint_dir))
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            config, dtype=dtype, experts_implementation=experts_implementation
        )
    assert isinstance(model, PreTrainedModel)
    return model


def load_model(
    checkpoint_dir: Path,
    placement: Placement,
    *,
    trained_in_full: bool,
    experts_implementation: ExpertsImplementation = DEFAULT_EXPERTS_IMPLEMENTATION,
) -> PreTrainedModel:
    """The checkpoint's model placed as ``placement`` says (see the module docstring), in eval
    mode."""
    dtype = placement.dtype(trained_in_full=trained_in_full)
    if not placement.reads_weights:
        model = meta_skeleton(checkpoint_dir, dtype, experts_implementation)
    else:
        partitioned: Any = (
            _zero3_partitioned_init(placement.bf16)
            if placement.sharding == "deepspeed"
            else _nothing()
        )
        with partitioned:
            loaded = AutoModelForCausalLM.from_pretrained(
                str(checkpoint_dir), dtype=dtype, experts_implementation=experts_implementation
            )
        assert isinstance(loaded, PreTrainedModel)
        model = loaded
        if placement.sharding == "none":
            model.to(placement.device)  # type: ignore[arg-type]
    model.train(False)
    return model


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def prepare_frozen(accelerator: Any, model: PreTrainedModel) -> Any:
    """A frozen model (the reference) placed like the policy: DeepSpeed partitions it (TRL's
    ``prepare_deepspeed``), FSDP2 shards it per layer and broadcasts rank 0's weights
    (accelerate's ``fsdp2_prepare_model``), FSDP1 per layer with ``sync_module_states`` (TRL's
    ``prepare_fsdp``), anything else is only moved to the device."""
    state = accelerator.state
    if getattr(state, "deepspeed_plugin", None) is not None:
        from trl.models.utils import prepare_deepspeed

        return prepare_deepspeed(model, accelerator)
    plugin = getattr(state, "fsdp_plugin", None)
    if plugin is not None and plugin.fsdp_version == 2:
        from accelerate.utils.fsdp_utils import fsdp2_prepare_model

        model.requires_grad_(False)  # not upcast to float32 master weights: nothing trains it
        prepared = fsdp2_prepare_model(accelerator, model)
        prepared.train(False)
        return prepared
    if plugin is not None:
        from trl.models.utils import prepare_fsdp

        return prepare_fsdp(model, accelerator)
    return accelerator.prepare_model(model, evaluation_mode=True)


@contextmanager
def zero3_init_off() -> Iterator[None]:
    """``from_pretrained`` whole on one process while a ZeRO-3 trainer's config is current
    (transformers reads it through a module-level weak reference, restored afterwards)."""
    from transformers.integrations import deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    hf_deepspeed.unset_hf_deepspeed_config()  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def _partitioned(model: torch.nn.Module) -> bool:
    return any(hasattr(p, "ds_id") for p in model.parameters())


def gathered_model(model: PreTrainedModel, is_main: bool) -> PreTrainedModel | None:
    """On every rank (a collective when ``model`` is ZeRO-3 partitioned): the whole model on the
    main rank, None on the others. A model that is not partitioned is returned as it is."""
    if not _partitioned(model):
        return model if is_main else None
    import deepspeed

    state: dict[str, torch.Tensor] = {}
    for name, param in model.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
            if is_main:
                state[name] = param.detach().to("cpu", copy=True)
    if not is_main:
        return None
    saved_keys = model.state_dict().keys()
    state.update({n: b.detach().cpu() for n, b in model.named_buffers() if n in saved_keys})
    with zero3_init_off(), init_empty_weights(include_buffers=False):
        plain = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            model.config, dtype=next(iter(state.values())).dtype
        )
    assert isinstance(plain, PreTrainedModel)
    plain.load_state_dict(state, strict=False, assign=True)
    plain.tie_weights()
    empty = [n for n, p in plain.named_parameters() if p.is_meta]
    if empty:
        raise RuntimeError(f"gathered state lacks {len(empty)} parameters, e.g. {empty[0]}")
    plain.train(False)
    return plain


def parameter_digests(model: torch.nn.Module) -> dict[str, tuple[float, float, float]]:
    """Per parameter of the whole model: (sum, sum of absolute values, sum of squares), in
    float64. Under FSDP2 each sharded parameter is gathered first, a collective: every rank
    calls this in the same order."""
    digests: dict[str, tuple[float, float, float]] = {}
    for name, param in model.named_parameters():
        full = param.full_tensor() if hasattr(param, "full_tensor") else param
        values = full.detach().to(torch.float64)
        digests[name] = (
            float(values.sum()),
            float(values.abs().sum()),
            float(values.square().sum()),
        )
    return digests
