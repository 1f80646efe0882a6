"""Run a benchmark module as ``make bench-*`` does and read its summary: the last stdout line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]


def bench_summary(module: str, *args: str, timeout_s: float = 300) -> dict[str, Any]:
    """``python -m <module> <args>`` in the repository root (it must exit 0); its last line of
    standard output, parsed as the one JSON object every benchmark ends with."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        cwd=REPO,
        check=True,
    )
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary
