"""The candidate in the format the replicas serve, before it is published to them.

The trainer writes bf16 checkpoints; GPU replicas may serve the fp8 export of their weights
(``serving.fp8``: compressed-tensors e4m3, kind ``fp8``), and a CPU box its dequantized twin
(kind ``fp8dq``). A hot swap cannot change a replica's quantization (the swap's preflight
refuses it, ``serving.swap_checks``), so the loop exports the candidate itself:

    served kind fp8 or fp8dq, candidate of another kind
        -> export_fp8(candidate, <work_dir>/exports): both twins, their drift measured against
           the candidate on held-out windows (in each twin's ``eval``), parent = the candidate;
           the twin of the served kind is what is published, released and recorded
    otherwise -> the candidate as it is

The kind is a checkpoint's version id prefix (``<kind>-<digest>``, ``serving.build``). The
export's parent link keeps lineage and taint: a forgotten record that trained the bf16
candidate taints its fp8 twin as a descendant (``traffic.store.versions``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from serving.build import read_version
from serving.fp8 import DEQUANTIZED_KIND, FP8_KIND, export_fp8

log = logging.getLogger(__name__)

QUANTIZED_KINDS = (FP8_KIND, DEQUANTIZED_KIND)


def kind_of(checkpoint_dir: Path) -> str:
    """A checkpoint's kind: its version id's prefix."""
    return read_version(checkpoint_dir).version_id.split("-", 1)[0]


def in_served_format(candidate_dir: Path, served_dir: Path, exports_dir: Path) -> Path:
    """``candidate_dir``, or its fp8 twin of the served kind (module docstring; blocking: it
    reads and writes the weights and runs the drift windows)."""
    served = kind_of(served_dir)
    if served not in QUANTIZED_KINDS or kind_of(candidate_dir) == served:
        return candidate_dir
    export = export_fp8(candidate_dir, exports_dir)
    published = export.fp8_dir if served == FP8_KIND else export.dequantized_dir
    log.info(
        "replicas serve %s weights: %s published as its export %s",
        served,
        candidate_dir.name,
        published.name,
    )
    return published
