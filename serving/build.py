"""Build versioned Qwen3-MoE checkpoints that vLLM and transformers load, from nothing but local
text and a seed.

A checkpoint directory holds `model.safetensors`, `config.json`, `generation_config.json`, the
tokenizer files (`tokenizer.json`, `tokenizer_config.json` with the chat template) and
`switchyard_version.json`. Its name is its version id, `base-<12 hex>`, the hex being a digest of
the weights (tensor names, dtypes, shapes and bytes) and of the tokenizer files: the same spec,
seed and tokenizer always give the same id, and a directory is never overwritten with different
contents.

`ensure_demo_model(cache_dir)` is the one call tests and the demo need: it trains the tokenizer
and builds the tiny model under `<cache_dir>/models/` the first time, and afterwards only reads
a few small files. CLI: `python -m serving.build --preset tiny --out DIR`.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_args

import torch
from pydantic import JsonValue
from safetensors import safe_open
from transformers import GenerationConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM

from serving.model_config import (
    VERSION_FILE,
    CheckpointVersion,
    ModelSpec,
    PresetName,
    ProbeReference,
)
from serving.tokenizer import (
    ENDOFTEXT,
    IM_END,
    TOKENIZER_FILES,
    TokenizerSpec,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)

DEFAULT_SEED = 0
DEMO_PRESET: PresetName = "tiny"
_DIGEST_HEX = 12


def make_version_id(kind: str, digest: str) -> str:
    """`<kind>-<first 12 hex of digest>`, e.g. `base-3f2a9c01b7de`."""
    return f"{kind}-{digest[:_DIGEST_HEX]}"


def weights_digest(checkpoint_dir: Path) -> str:
    """SHA-256 over every tensor of the directory's `*.safetensors` files, in name order.

    Independent of file headers and sharding: only names, dtypes, shapes and bytes count.
    """
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {checkpoint_dir}")
    digest = hashlib.sha256()
    tensors: dict[str, Path] = {}
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            tensors.update(dict.fromkeys(handle.keys(), file))
    for name in sorted(tensors):
        with safe_open(str(tensors[name]), framework="pt") as handle:
            tensor = handle.get_tensor(name).contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def checkpoint_digest(checkpoint_dir: Path) -> str:
    """SHA-256 of the weights (`weights_digest`) and the tokenizer files: what the served model
    computes and how text maps to ids. Version ids are made from it."""
    digest = hashlib.sha256(weights_digest(checkpoint_dir).encode())
    for name in TOKENIZER_FILES:
        digest.update(hashlib.sha256((checkpoint_dir / name).read_bytes()).digest())
    return digest.hexdigest()


def read_version(checkpoint_dir: Path) -> CheckpointVersion:
    """The checkpoint's `switchyard_version.json`."""
    return CheckpointVersion.model_validate_json((checkpoint_dir / VERSION_FILE).read_text())


def hf_config(spec: ModelSpec, *, eos_token_id: int, pad_token_id: int) -> Qwen3MoeConfig:
    """The transformers config for `spec` (no bos token: ChatML needs none)."""
    # `head_dim` is read by the Qwen3 attention but is not in the config's typed signature.
    extra: dict[str, Any] = {"head_dim": spec.head_dim}
    return Qwen3MoeConfig(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        moe_intermediate_size=spec.moe_intermediate_size,
        num_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        norm_topk_prob=spec.norm_topk_prob,
        max_position_embeddings=spec.max_position_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        rms_norm_eps=spec.rms_norm_eps,
        initializer_range=spec.initializer_range,
        tie_word_embeddings=spec.tie_word_embeddings,
        dtype=spec.dtype,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=None,
        **extra,
    )


def add_legacy_config_keys(config_path: Path) -> None:
    # transformers 5 writes `num_local_experts` and `rope_parameters`; transformers 4 (an older
    # vLLM on a GPU box) reads `num_experts` and `rope_theta`. Both spellings load in 5.
    config = json.loads(config_path.read_text())
    if "num_local_experts" in config:
        config.setdefault("num_experts", config["num_local_experts"])
    rope = config.get("rope_parameters") or {}
    if "rope_theta" in rope:
        config.setdefault("rope_theta", rope["rope_theta"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def build_model(
    spec: ModelSpec, tokenizer_dir: Path, out_dir: Path, seed: int = DEFAULT_SEED
) -> Path:
    """Randomly initialise `spec` with `seed` and save it as `out_dir/<version_id>/`.

    Deterministic: the same spec, seed and library versions give the same weights and version
    id. If that directory already exists it is kept as is (same contents by construction) and
    returned. The global torch RNG state is left untouched. Raises ValueError if the tokenizer
    has more ids than `spec.vocab_size`.
    """
    tokenizer = load_tokenizer(tokenizer_dir)
    if len(tokenizer) > spec.vocab_size:
        raise ValueError(
            f"tokenizer in {tokenizer_dir} has {len(tokenizer)} ids but spec.vocab_size is "
            f"{spec.vocab_size}; set vocab_size >= {len(tokenizer)}"
        )
    eos_id = tokenizer.convert_tokens_to_ids(IM_END)
    pad_id = tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    assert isinstance(eos_id, int) and isinstance(pad_id, int)
    config = hf_config(spec, eos_token_id=eos_id, pad_token_id=pad_id)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3MoeForCausalLM(config).to(getattr(torch, spec.dtype))  # type: ignore[no-untyped-call]
    model.generation_config = GenerationConfig(  # type: ignore[no-untyped-call]
        eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, bos_token_id=None
    )

    with staging_dir(out_dir) as staging:
        save_hf_model(model, staging)
        save_tokenizer(tokenizer, staging)
        return finalize_checkpoint(staging, out_dir, kind="base", parent=None, spec=spec, seed=seed)


def save_hf_model(model: Qwen3MoeForCausalLM, target: Path) -> None:
    """`save_pretrained` plus the config keys older transformers/vLLM versions read."""
    model.save_pretrained(str(target))
    add_legacy_config_keys(target / "config.json")


@contextmanager
def staging_dir(out_dir: Path) -> Iterator[Path]:
    """A fresh hidden directory under `out_dir` to write a checkpoint into; removed on exit
    unless `finalize_checkpoint` renamed it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    staging = out_dir / f".building-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def finalize_checkpoint(
    staging: Path,
    out_dir: Path,
    *,
    kind: str,
    parent: str | None,
    spec: ModelSpec,
    seed: int | None,
    metadata: dict[str, JsonValue] | None = None,
    eval: dict[str, float] | None = None,
    probe: ProbeReference | None = None,
) -> Path:
    """Write `switchyard_version.json` into a fully written `staging` directory (weights and
    tokenizer files) and rename it to `out_dir/<kind>-<digest>`.

    If that directory already exists it holds the same weights and tokenizer by construction;
    it is kept as is (its metadata included) and returned.
    """
    version = CheckpointVersion(
        version_id=make_version_id(kind, checkpoint_digest(staging)),
        parent=parent,
        created_at=datetime.now(UTC),
        spec=spec,
        seed=seed,
        metadata=metadata or {},
        eval=eval or {},
        probe=probe,
    )
    # Unset optional fields are left out: a fresh init writes the same file as before they existed.
    (staging / VERSION_FILE).write_text(
        version.model_dump_json(indent=2, exclude_defaults=True) + "\n"
    )
    target = out_dir / version.version_id
    if not target.exists():
        staging.rename(target)
    return target


def copy_tokenizer_files(source_dir: Path, target_dir: Path) -> None:
    """Copy the tokenizer files byte for byte (they are part of the checkpoint's identity)."""
    for name in TOKENIZER_FILES:
        shutil.copyfile(source_dir / name, target_dir / name)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    # Serialises concurrent builders (two test sessions, a test and the demo) on one cache.
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def tokenizer_dir_for(models_dir: Path, spec: TokenizerSpec) -> Path:
    """Where `ensure_tokenizer` keeps the tokenizer trained from `spec`."""
    return models_dir / "tokenizers" / f"bpe-{spec.fingerprint()[:_DIGEST_HEX]}"


def ensure_tokenizer(models_dir: Path, spec: TokenizerSpec, *, progress: bool = False) -> Path:
    """`tokenizer_dir_for(models_dir, spec)`, trained once and reused afterwards."""
    target = tokenizer_dir_for(models_dir, spec)
    if (target / "tokenizer_config.json").exists():
        return target
    staging = target.with_name(f".building-{uuid.uuid4().hex}")
    try:
        train_tokenizer(spec, staging, progress=progress)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def find_checkpoint(
    family_dir: Path, spec: ModelSpec, seed: int, tokenizer_dir: Path
) -> Path | None:
    """A fresh-init checkpoint under `family_dir` of `spec` and `seed` whose tokenizer files
    are those of `tokenizer_dir`, if one was built."""
    if not (tokenizer_dir / "tokenizer_config.json").exists():
        return None
    for version_file in sorted(family_dir.glob(f"*/{VERSION_FILE}")):
        checkpoint = version_file.parent
        version = read_version(checkpoint)
        if (
            version.parent is None
            and version.spec == spec
            and version.seed == seed
            and all(
                (checkpoint / name).read_bytes() == (tokenizer_dir / name).read_bytes()
                for name in TOKENIZER_FILES
            )
        ):
            return checkpoint
    return None


def ensure_demo_model(cache_dir: Path, *, progress: bool = False) -> Path:
    """The tiny demo checkpoint under `<cache_dir>/models/tiny/<version_id>/`, built if missing.

    Idempotent and safe to call from concurrent processes (a file lock guards the build). A
    change of the tiny preset, the tokenizer spec or the chat template builds a new checkpoint;
    otherwise the existing one is found by reading a few small files.
    """
    return ensure_model(cache_dir / "models", DEMO_PRESET, DEFAULT_SEED, progress=progress)


def ensure_model(
    models_dir: Path, preset: PresetName, seed: int = DEFAULT_SEED, *, progress: bool = False
) -> Path:
    """The fresh-init checkpoint of `preset` and `seed` under `<models_dir>/<preset>/`, built
    (with its tokenizer under `<models_dir>/tokenizers/`) if missing. Idempotent and safe to
    call from concurrent processes."""
    spec = ModelSpec.preset(preset)
    tokenizer_spec = TokenizerSpec(vocab_size=spec.vocab_size)
    family_dir = models_dir / preset
    tokenizer_dir = tokenizer_dir_for(models_dir, tokenizer_spec)
    found = find_checkpoint(family_dir, spec, seed, tokenizer_dir)
    if found is not None:
        return found
    with _exclusive(models_dir / ".build.lock"):
        ensure_tokenizer(models_dir, tokenizer_spec, progress=progress)
        found = find_checkpoint(family_dir, spec, seed, tokenizer_dir)
        if found is not None:
            return found
        return build_model(spec, tokenizer_dir, family_dir, seed)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: train a tokenizer (unless given one) and build a checkpoint; prints its path."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.build", description="Build a random-init Qwen3-MoE checkpoint."
    )
    parser.add_argument("--preset", choices=get_args(PresetName), default=DEMO_PRESET)
    parser.add_argument("--out", type=Path, required=True, help="Parent of checkpoint dirs.")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument(
        "--tokenizer-dir", type=Path, default=None, help="Reuse this tokenizer (default: train)."
    )
    args = parser.parse_args(argv)
    spec = ModelSpec.preset(args.preset)
    tokenizer_dir: Path = args.tokenizer_dir or ensure_tokenizer(
        args.out, TokenizerSpec(vocab_size=spec.vocab_size), progress=True
    )
    checkpoint = build_model(spec, tokenizer_dir, args.out, args.seed)
    version = read_version(checkpoint)
    print(f"{version.version_id} ({spec.parameter_count():,} parameters): {checkpoint}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
