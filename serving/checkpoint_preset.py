"""A preset for a real Hugging Face Qwen3-MoE checkpoint given as a local path (e.g. a downloaded
Qwen3-30B-A3B), made into a versioned checkpoint that serving, fp8 export and hot-swap take like
one of ours. Nothing is downloaded: config, tokenizer and chat template come from its directory.

How a checkpoint is checked (`inspect_hf_checkpoint`), each failure a `CheckpointPresetError`
that names the file and what to do:
- `config.json`: `model_type` `qwen3_moe` and `Qwen3MoeForCausalLM` among its `architectures`
  (what transformers and vLLM load as Qwen3-MoE); parsed by transformers' `Qwen3MoeConfig`, so
  both the transformers-4 spelling (`num_experts`, `rope_theta`, `torch_dtype`) and the
  transformers-5 one (`num_local_experts`, `rope_parameters`, `dtype`) are read. Refused: what
  `ModelSpec` cannot describe (dense layers through `mlp_only_layers` or `decoder_sparse_step`
  != 1, attention bias, sliding window, rope scaling, an activation other than silu, weights
  neither bf16 nor fp32) and quantized checkpoints (`quantization_config`: adopt the bf16 release).
- Tokenizer: `tokenizer.json` and `tokenizer_config.json`; a chat template in
  `chat_template.jinja` (transformers 5's layout) or inline in `tokenizer_config.json`
  (Qwen's releases); at most `vocab_size` ids.
- Weights: `model.safetensors`, or `model.safetensors.index.json` whose every shard is present.
  The tensor names in the shards' headers (nothing else is read) must be exactly those of a
  Qwen3-MoE of the config's shape: per layer q/k/v/o projections, q/k norms, the router
  (`mlp.gate`), every expert's gate/up/down projection and two norms; embeddings, final norm
  and `lm_head` (unless tied).

How it is adopted (`adopt_hf_checkpoint`): `<models_dir>/hf/hf-<12 hex>/` is written like any
checkpoint of `serving.build`: the weight shards and their index linked (symlinks by default,
so tens of GB are not copied; `weights="copy"` for a self-contained directory),
`config.json` copied with the keys older transformers read, `generation_config.json` copied
(or derived from the config), `tokenizer.json` copied and `tokenizer_config.json` with the chat
template inline (the files `serving.tokenizer.TOKENIZER_FILES` names, the ones fp8 export and
hot-swap carry along and compare), and `switchyard_version.json`: the spec read from the config,
no parent, no seed, the source path in `metadata`. The version id hashes weights and tokenizer
files (`serving.build.checkpoint_digest`: every byte is read once, minutes for a 60 GB model);
adopting the same unchanged source again finds the directory from a signature of its files'
paths, sizes and mtimes, without hashing.

Serving: `launch_config` completes a `serving/configs` launch preset with the adopted directory
and caps `max_model_len` at `max_position_embeddings` (vLLM refuses a longer one).

CLI: `python -m serving.checkpoint_preset --checkpoint /models/Qwen3-30B-A3B --out .cache/models
[--launch-preset gpu-hf-moe]` prints the adopted directory (and the launch command).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from safetensors import SafetensorError, safe_open
from transformers import GenerationConfig, Qwen3MoeConfig

from serving.build import (
    add_legacy_config_keys,
    finalize_checkpoint,
    read_version,
    staging_dir,
)
from serving.launch import DEFAULT_PORT, preset_names, rendered
from serving.launch import launch_config as preset_launch_config
from serving.model_config import VERSION_FILE, ModelSpec
from serving.tokenizer import load_tokenizer
from serving.vllm_config import VllmLaunchConfig

MODEL_TYPE = "qwen3_moe"
ARCHITECTURE = "Qwen3MoeForCausalLM"
HF_KIND = "hf"
SINGLE_WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
CHAT_TEMPLATE_FILE = "chat_template.jinja"
EXTRA_TEMPLATES_DIR = "additional_chat_templates"
#: Launch preset of the CLI when none is named: a GPU replica serving the bf16 release.
DEFAULT_LAUNCH_PRESET = "gpu-hf-moe"

WeightsMode = Literal["symlink", "copy"]


class CheckpointPresetError(ValueError):
    """The directory is not a Qwen3-MoE checkpoint this preset can adopt; says what is wrong."""


class HfCheckpointPreset(BaseModel):
    """Which local checkpoint to adopt and how its weights enter the adopted directory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path = Field(description="Checkpoint directory: config, tokenizer, safetensors.")
    weights: WeightsMode = Field(
        default="symlink",
        description="'symlink': link the shards (the source must stay where it is and be "
        "mounted at the same path wherever the adopted directory is used); 'copy': copy them.",
    )


@dataclass(frozen=True)
class HfCheckpoint:
    """A checked checkpoint: where it is, its shape, and the files that make it up."""

    path: Path
    spec: ModelSpec
    weight_files: tuple[str, ...]  # shard names, relative to `path`
    index_file: str | None  # `model.safetensors.index.json` when sharded
    chat_template: str | list[dict[str, str]]
    tokenizer_ids: int


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CheckpointPresetError(f"{path} is missing")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointPresetError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CheckpointPresetError(f"{path} must hold a JSON object")
    return data


def _check_architecture(path: Path, raw: Mapping[str, Any]) -> None:
    model_type, architectures = raw.get("model_type"), raw.get("architectures") or []
    if model_type != MODEL_TYPE or ARCHITECTURE not in architectures:
        raise CheckpointPresetError(
            f"{path / 'config.json'} describes model_type={model_type!r}, "
            f"architectures={architectures}; this preset takes Qwen3-MoE checkpoints "
            f"(model_type {MODEL_TYPE!r}, {ARCHITECTURE}), e.g. Qwen/Qwen3-30B-A3B"
        )
    if raw.get("quantization_config"):
        raise CheckpointPresetError(
            f"{path} is already quantized ({raw['quantization_config'].get('quant_method')}); "
            "adopt the bf16 release and export it with `python -m serving.fp8`"
        )


def spec_from_config(config: Qwen3MoeConfig) -> ModelSpec:
    """The `ModelSpec` of a transformers Qwen3-MoE config; CheckpointPresetError for a shape
    it cannot describe (see the module docstring)."""
    rope = dict(config.rope_parameters or {})
    unsupported = {
        "mlp_only_layers": bool(config.mlp_only_layers),
        "decoder_sparse_step": config.decoder_sparse_step != 1,
        "attention_bias": bool(config.attention_bias),
        "use_sliding_window": bool(config.use_sliding_window),
        "rope scaling": rope.get("rope_type", "default") != "default",
        "hidden_act": config.hidden_act != "silu",
    }
    refused = [name for name, bad in unsupported.items() if bad]
    if refused:
        raise CheckpointPresetError(
            f"Qwen3-MoE variant not supported ({', '.join(refused)}): only every-layer-MoE "
            "models with silu, no attention bias, full attention and plain rope are"
        )
    dtype = str(config.dtype).removeprefix("torch.") if config.dtype is not None else "bfloat16"
    try:
        return ModelSpec(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            num_key_value_heads=config.num_key_value_heads,
            # Not a declared field of the config class; Qwen3's attention falls back the same way.
            head_dim=getattr(config, "head_dim", None)
            or config.hidden_size // config.num_attention_heads,
            num_experts=config.num_experts,
            num_experts_per_tok=config.num_experts_per_tok,
            moe_intermediate_size=config.moe_intermediate_size,
            intermediate_size=config.intermediate_size,
            norm_topk_prob=config.norm_topk_prob,
            max_position_embeddings=config.max_position_embeddings,
            rope_theta=rope["rope_theta"],
            rms_norm_eps=config.rms_norm_eps,
            initializer_range=config.initializer_range,
            tie_word_embeddings=config.tie_word_embeddings,
            dtype=dtype,  # type: ignore[arg-type]  # validated by ModelSpec
        )
    except ValidationError as exc:
        raise CheckpointPresetError(f"config outside what ModelSpec accepts: {exc}") from exc


def expected_tensor_names(spec: ModelSpec) -> set[str]:
    """Every tensor name of a Qwen3-MoE checkpoint of `spec`, as Qwen's releases and
    transformers' `save_pretrained` write them."""
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not spec.tie_word_embeddings:
        names.add("lm_head.weight")
    for layer in range(spec.num_hidden_layers):
        prefix = f"model.layers.{layer}"
        names |= {
            f"{prefix}.{part}.weight"
            for part in (
                "input_layernorm",
                "post_attention_layernorm",
                "self_attn.q_proj",
                "self_attn.k_proj",
                "self_attn.v_proj",
                "self_attn.o_proj",
                "self_attn.q_norm",
                "self_attn.k_norm",
                "mlp.gate",
            )
        }
        names |= {
            f"{prefix}.mlp.experts.{expert}.{proj}.weight"
            for expert in range(spec.num_experts)
            for proj in ("gate_proj", "up_proj", "down_proj")
        }
    return names


def _weight_files(path: Path) -> tuple[tuple[str, ...], str | None, dict[str, str]]:
    """(shard names, index file name or None, tensor name -> shard) from the directory."""
    index_path = path / WEIGHTS_INDEX_FILE
    if index_path.is_file():
        weight_map = _read_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointPresetError(f"{index_path} has no weight_map")
        shards = tuple(sorted(set(weight_map.values())))
        missing = [name for name in shards if not (path / name).is_file()]
        if missing:
            raise CheckpointPresetError(
                f"{index_path} names {len(missing)} shard(s) absent from {path}: "
                f"{', '.join(missing[:3])} (an incomplete download?)"
            )
        return shards, WEIGHTS_INDEX_FILE, dict(weight_map)
    if (path / SINGLE_WEIGHTS_FILE).is_file():
        return (SINGLE_WEIGHTS_FILE,), None, {}
    raise CheckpointPresetError(
        f"no weights in {path}: expected {SINGLE_WEIGHTS_FILE} or {WEIGHTS_INDEX_FILE} with its "
        "shards (safetensors only)"
    )


def _check_tensor_names(
    path: Path, shards: Sequence[str], weight_map: Mapping[str, str], spec: ModelSpec
) -> None:
    found: dict[str, str] = {}
    for shard in shards:
        try:
            with safe_open(str(path / shard), framework="pt") as handle:
                found.update(dict.fromkeys(handle.keys(), shard))
        except (SafetensorError, OSError) as exc:
            raise CheckpointPresetError(
                f"{path / shard} is not a readable safetensors file: {exc}"
            ) from exc
    misplaced = sorted(n for n, shard in weight_map.items() if found.get(n) != shard)
    if misplaced:
        raise CheckpointPresetError(
            f"{WEIGHTS_INDEX_FILE} places {len(misplaced)} tensor(s) in a shard that lacks them, "
            f"e.g. {misplaced[0]}"
        )
    expected = expected_tensor_names(spec)
    missing, extra = sorted(expected - found.keys()), sorted(found.keys() - expected)
    if missing or extra:
        raise CheckpointPresetError(
            f"the weights in {path} are not a Qwen3-MoE of its config.json: "
            f"{len(missing)} tensor(s) missing (e.g. {missing[:2]}), "
            f"{len(extra)} unexpected (e.g. {extra[:2]})"
        )


def _chat_template(path: Path, tokenizer_config: Mapping[str, Any]) -> str | list[dict[str, str]]:
    """The template transformers would use: `chat_template.jinja` (plus named ones from
    `additional_chat_templates/`) over the config's own."""
    jinja = path / CHAT_TEMPLATE_FILE
    if jinja.is_file():
        default = jinja.read_text()
        extra_dir = path / EXTRA_TEMPLATES_DIR
        extra = sorted(extra_dir.glob("*.jinja")) if extra_dir.is_dir() else []
        if not extra:
            return default
        named = [{"name": "default", "template": default}]
        return named + [{"name": file.stem, "template": file.read_text()} for file in extra]
    inline = tokenizer_config.get("chat_template")
    if isinstance(inline, str) and inline.strip():
        return inline
    if isinstance(inline, list) and inline:
        return [{"name": str(t["name"]), "template": str(t["template"])} for t in inline]
    raise CheckpointPresetError(
        f"no chat template in {path}: expected {CHAT_TEMPLATE_FILE} or a chat_template in "
        "tokenizer_config.json (the served model must be prompted as it was trained)"
    )


def inspect_hf_checkpoint(path: Path) -> HfCheckpoint:
    """Check `path` (see the module docstring); raises CheckpointPresetError."""
    if not path.is_dir():
        raise CheckpointPresetError(f"{path} is not a directory")
    raw = _read_json(path / "config.json")
    _check_architecture(path, raw)
    config = Qwen3MoeConfig.from_pretrained(str(path), local_files_only=True)
    spec = spec_from_config(config)
    if not (path / "tokenizer.json").is_file():
        raise CheckpointPresetError(
            f"{path / 'tokenizer.json'} is missing: a fast tokenizer file is required"
        )
    template = _chat_template(path, _read_json(path / "tokenizer_config.json"))
    tokenizer_ids = len(load_tokenizer(path))
    if tokenizer_ids > spec.vocab_size:
        raise CheckpointPresetError(
            f"the tokenizer in {path} has {tokenizer_ids} ids, more than vocab_size "
            f"{spec.vocab_size} in config.json"
        )
    shards, index_file, weight_map = _weight_files(path)
    _check_tensor_names(path, shards, weight_map, spec)
    return HfCheckpoint(path.resolve(), spec, shards, index_file, template, tokenizer_ids)


def source_signature(checkpoint: HfCheckpoint) -> str:
    """Hex digest of the source's path and its files' sizes and mtimes (not their bytes): an
    unchanged source adopted again is found without hashing its weights."""
    digest = hashlib.sha256(str(checkpoint.path).encode())
    names = [
        *checkpoint.weight_files,
        *([checkpoint.index_file] if checkpoint.index_file else []),
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        CHAT_TEMPLATE_FILE,
    ]
    for name in names:
        file = checkpoint.path / name
        if file.exists():
            stat = file.stat()
            digest.update(f"{name}|{stat.st_size}|{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()


def find_adopted(family_dir: Path, signature: str) -> Path | None:
    """An adopted directory under `family_dir` made from a source with this signature whose
    linked weights are all still reachable."""
    for version_file in sorted(family_dir.glob(f"*/{VERSION_FILE}")):
        directory = version_file.parent
        if read_version(directory).metadata.get("source_signature") != signature:
            continue
        if all(file.exists() for file in directory.glob("*.safetensors")):
            return directory
    return None


def _write_tokenizer_files(checkpoint: HfCheckpoint, target: Path) -> None:
    shutil.copyfile(checkpoint.path / "tokenizer.json", target / "tokenizer.json")
    config = _read_json(checkpoint.path / "tokenizer_config.json")
    config["chat_template"] = checkpoint.chat_template
    (target / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False) + "\n"
    )


def _write_generation_config(checkpoint: HfCheckpoint, target: Path) -> None:
    source = checkpoint.path / "generation_config.json"
    if source.is_file():
        shutil.copyfile(source, target / "generation_config.json")
        return
    config = Qwen3MoeConfig.from_pretrained(str(checkpoint.path), local_files_only=True)
    GenerationConfig.from_model_config(config).save_pretrained(str(target))


def adopt_hf_checkpoint(preset: HfCheckpointPreset, models_dir: Path) -> Path:
    """The versioned checkpoint `<models_dir>/hf/hf-<hex>/` of `preset.path` (see the module
    docstring), written the first time and found afterwards. Raises CheckpointPresetError."""
    checkpoint = inspect_hf_checkpoint(preset.path)
    family_dir = models_dir / HF_KIND
    signature = source_signature(checkpoint)
    found = find_adopted(family_dir, signature)
    if found is not None:
        return found
    linked = [*checkpoint.weight_files, *([checkpoint.index_file] if checkpoint.index_file else [])]
    with staging_dir(family_dir) as staging:
        for name in linked:
            if preset.weights == "symlink":
                (staging / name).symlink_to(checkpoint.path / name)
            else:
                shutil.copyfile(checkpoint.path / name, staging / name)
        shutil.copyfile(checkpoint.path / "config.json", staging / "config.json")
        add_legacy_config_keys(staging / "config.json")
        _write_generation_config(checkpoint, staging)
        _write_tokenizer_files(checkpoint, staging)
        metadata: dict[str, JsonValue] = {
            "kind": "hf-checkpoint",
            "source": str(checkpoint.path),
            "source_signature": signature,
            "architecture": ARCHITECTURE,
            "weights": preset.weights,
            "weight_files": list(checkpoint.weight_files),
            "tokenizer_ids": checkpoint.tokenizer_ids,
        }
        return finalize_checkpoint(
            staging,
            family_dir,
            kind=HF_KIND,
            parent=None,
            spec=checkpoint.spec,
            seed=None,
            metadata=metadata,
        )


def launch_config(
    preset_name: str,
    checkpoint_dir: Path,
    *,
    cache_dir: Path,
    port: int = DEFAULT_PORT,
    **overrides: Any,
) -> VllmLaunchConfig:
    """Launch preset `preset_name` serving the adopted `checkpoint_dir`, its `max_model_len`
    capped at the checkpoint's `max_position_embeddings` (unless overridden)."""
    spec = read_version(checkpoint_dir).spec
    config = preset_launch_config(
        preset_name, model_dir=checkpoint_dir, cache_dir=cache_dir, port=port, **overrides
    )
    if "max_model_len" in overrides or config.max_model_len <= spec.max_position_embeddings:
        return config
    return config.model_copy(update={"max_model_len": spec.max_position_embeddings})


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: adopt a local checkpoint; print its directory and a launch command."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.checkpoint_preset",
        description="Adopt a local Hugging Face Qwen3-MoE checkpoint as a versioned checkpoint.",
    )
    parser.add_argument("--checkpoint", type=Path, required=True, help="HF checkpoint dir.")
    parser.add_argument("--out", type=Path, required=True, help="Models dir (adopted in hf/).")
    parser.add_argument(
        "--weights",
        choices=("symlink", "copy"),
        default=HfCheckpointPreset.model_fields["weights"].default,
    )
    parser.add_argument("--launch-preset", choices=preset_names(), default=DEFAULT_LAUNCH_PRESET)
    parser.add_argument("--cache-dir", type=Path, default=Path(".cache"))
    args = parser.parse_args(argv)
    try:
        adopted = adopt_hf_checkpoint(
            HfCheckpointPreset(path=args.checkpoint, weights=args.weights), args.out
        )
    except CheckpointPresetError as exc:
        parser.exit(2, f"error: {exc}\n")
    version = read_version(adopted)
    print(f"{version.version_id} ({version.spec.parameter_count():,} parameters): {adopted}")
    print(rendered(launch_config(args.launch_preset, adopted, cache_dir=args.cache_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
