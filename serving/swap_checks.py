"""The checks of a weight hot-swap (:mod:`serving.hotswap`) that need no replica.

Preflight, before anything is drained: the new checkpoint has the same architecture (`spec`),
the same quantization (config.json's `quantization_config`: a bf16 checkpoint cannot be reloaded
into fp8 replicas) and byte-identical tokenizer files as the previous one (an in-place reload
changes none of them), and its weights match its version id (optional digest check).

The probe's bound: the served logprob of every probe token may differ from the trainer's by
`mean_abs` on average and `max_abs` at most; 0.1 / 1.5 nats for a bf16 checkpoint, 0.3 / 3.0
for an fp8 one (its dynamic activations add drift), or what `--probe-mean-abs` /
`--probe-max-abs` set. The prefix-cache check (:mod:`serving.prefix_cache_check`) uses it too.

Every call of a swap times out after `request_timeout_s + timeout_s_per_gb * GB`, GB the larger
checkpoint's safetensors (`call_timeout_s`; defaults and their reason: `HotSwapConfig`), or
what `--request-timeout-s` / `--timeout-s-per-gb` set.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from serving.build import checkpoint_digest, make_version_id, read_version
from serving.model_config import ProbeReference
from serving.tokenizer import TOKENIZER_FILES


class HotSwapError(Exception):
    """A publish could not be completed or rolled back; the message says where it stopped."""


@dataclass(frozen=True)
class ProbeResult:
    """Served vs reference logprobs of the probe prompt on one replica."""

    tokens: int
    mean_abs_diff: float
    max_abs_diff: float
    passed: bool


class ProbeTolerance(BaseModel):
    """How far served prompt logprobs may be from the trainer's (nats)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean_abs: float = Field(default=0.1, gt=0, description="Mean |served - reference|.")
    max_abs: float = Field(default=1.5, gt=0, description="Largest single |difference|.")


# fp8 activations (per-token dynamic) add drift on top of the weights' own; the trainer's
# reference is float32 math on the dequantized weights (tests/serving/test_fp8.py serves it).
FP8_PROBE_TOLERANCE: Final = ProbeTolerance(mean_abs=0.3, max_abs=3.0)


def compare_probe(
    reference: ProbeReference, served: Sequence[float], tolerance: ProbeTolerance
) -> ProbeResult:
    """Compare served prompt logprobs (one per predicted token) with the reference."""
    if len(served) != len(reference.logprobs):
        raise ValueError(f"{len(served)} served logprobs for {len(reference.logprobs)} expected")
    diffs = [abs(a - b) for a, b in zip(served, reference.logprobs, strict=True)]
    mean, worst = sum(diffs) / len(diffs), max(diffs)
    passed = mean <= tolerance.mean_abs and worst <= tolerance.max_abs
    return ProbeResult(len(diffs), mean, worst, passed)


def check_compatible(new: Path, previous: Path, *, verify_digest: bool = True) -> None:
    """Preflight on the checkpoints (see the module docstring); raises HotSwapError."""
    new_version, old_version = read_version(new), read_version(previous)
    if new_version.spec != old_version.spec:
        raise HotSwapError(
            f"{new_version.version_id} has another architecture than {old_version.version_id}; "
            "an in-place reload cannot change it: start new replicas instead"
        )
    new_quant, old_quant = _quantization(new), _quantization(previous)
    if new_quant != old_quant:
        raise HotSwapError(
            f"{new_version.version_id} is {new_quant} and the replicas serve {old_quant}"
            f" ({old_version.version_id}): an in-place reload cannot change the quantization;"
            " export the candidate to the served format first (serving.fp8 for fp8 replicas)"
        )
    for name in TOKENIZER_FILES:
        if (new / name).read_bytes() != (previous / name).read_bytes():
            raise HotSwapError(f"{name} differs between {new} and {previous}: reload keeps it")
    if verify_digest:
        kind = new_version.version_id.rsplit("-", 1)[0]
        if make_version_id(kind, checkpoint_digest(new)) != new_version.version_id:
            raise HotSwapError(f"weights in {new} do not match {new_version.version_id}")


def probe_tolerance(configured: ProbeTolerance | None, checkpoint: Path) -> ProbeTolerance:
    """The probe's bound for ``checkpoint``: the configured one, else by its format."""
    if configured is not None:
        return configured
    return ProbeTolerance() if _quantization(checkpoint) == "unquantized" else FP8_PROBE_TOLERANCE


def add_probe_arguments(parser: argparse.ArgumentParser) -> None:
    """``--probe-mean-abs`` / ``--probe-max-abs``: override the probe's bound."""
    parser.add_argument("--probe-mean-abs", type=float, default=None, help="Probe bound (nats).")
    parser.add_argument("--probe-max-abs", type=float, default=None, help="Probe bound (nats).")


def tolerance_from(args: argparse.Namespace) -> ProbeTolerance | None:
    """The bound the CLI asked for (None: by the checkpoint's format)."""
    if args.probe_mean_abs is None and args.probe_max_abs is None:
        return None
    default = ProbeTolerance()
    return ProbeTolerance(
        mean_abs=args.probe_mean_abs if args.probe_mean_abs is not None else default.mean_abs,
        max_abs=args.probe_max_abs if args.probe_max_abs is not None else default.max_abs,
    )


def checkpoint_gb(checkpoint: Path) -> float:
    """Size of a checkpoint's weights (its safetensors files) in GB (1e9 bytes)."""
    return sum(path.stat().st_size for path in checkpoint.glob("*.safetensors")) / 1e9


def call_timeout_s(base_s: float, per_gb_s: float, checkpoints: Sequence[Path]) -> float:
    """A swap's per-call timeout: `base_s` plus `per_gb_s` per GB of the largest checkpoint."""
    return base_s + per_gb_s * max(checkpoint_gb(path) for path in checkpoints)


def add_timeout_arguments(parser: argparse.ArgumentParser) -> None:
    """``--request-timeout-s`` / ``--timeout-s-per-gb``: override the per-call timeout."""
    parser.add_argument(
        "--request-timeout-s", type=float, default=None, help="Every call's base timeout (s)."
    )
    parser.add_argument(
        "--timeout-s-per-gb", type=float, default=None, help="Seconds added per checkpoint GB."
    )


def timeout_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The `HotSwapConfig` fields the CLI set (none: its defaults)."""
    fields = {
        "request_timeout_s": args.request_timeout_s,
        "timeout_s_per_gb": args.timeout_s_per_gb,
    }
    return {name: value for name, value in fields.items() if value is not None}


def _quantization(checkpoint: Path) -> str:
    """A checkpoint's weight format as its config.json says: ``unquantized`` or the
    ``quantization_config``'s method and format (e.g. ``compressed-tensors/float-quantized``)."""
    config = json.loads((checkpoint / "config.json").read_text())
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return "unquantized"
    return f"{quant.get('quant_method')}/{quant.get('format', '')}".rstrip("/")
