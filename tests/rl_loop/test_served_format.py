"""A candidate is published in the format the replicas serve: the fp8 twin where they serve fp8,
the dequantized twin where a CPU box serves that, the candidate itself otherwise; the twin's
parent is the candidate (lineage and taint follow it)."""

from __future__ import annotations

from pathlib import Path

from rl_loop.served_format import in_served_format, kind_of
from serving.build import read_version
from serving.fp8 import DEQUANTIZED_KIND, FP8_KIND, export_fp8


def test_a_candidate_goes_out_in_the_format_the_replicas_serve(
    micro_model: Path, tmp_path: Path
) -> None:
    served = export_fp8(micro_model, tmp_path / "served", drift_window_count=2)
    source = read_version(micro_model).version_id
    for served_dir, kind in (
        (served.fp8_dir, FP8_KIND),
        (served.dequantized_dir, DEQUANTIZED_KIND),
    ):
        out = in_served_format(micro_model, served_dir, tmp_path / f"exports-{kind}")
        assert kind_of(out) == kind and out != micro_model
        assert read_version(out).parent == source
        assert read_version(out).eval  # its drift against the candidate, measured
    assert in_served_format(micro_model, micro_model, tmp_path / "none") == micro_model
    assert not (tmp_path / "none").exists()  # nothing exported for bf16 replicas
    same = served.dequantized_dir
    assert in_served_format(same, same, tmp_path / "again") == same  # already the served kind
