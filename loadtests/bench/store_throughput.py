"""Write throughput of the traffic store, measured by ``python -m traffic.store.bench``.

loadtests reaches the project only over HTTP or a command line (tests/test_architecture.py), so
the measurement itself lives beside the store and is run here as a subprocess; its JSON is read
back into :class:`StoreFigure`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

STORE_BENCH_TIMEOUT_S = 900.0


@dataclass(frozen=True, slots=True)
class StoreFigure:
    backend: str
    records_per_s: float | None
    records: int
    written: int
    spooled: int
    seconds: float | None
    batch_size: int
    reason: str | None = None  # why records_per_s is None


def run(
    backends: tuple[str, ...], n: int, postgres_url: str, work_dir: Path
) -> dict[str, StoreFigure]:
    """records/s per backend; a backend that cannot run gets ``records_per_s=None`` and why."""
    cmd = [
        sys.executable,
        "-m",
        "traffic.store.bench",
        "--records",
        str(n),
        "--backends",
        ",".join(backends),
        "--postgres-url",
        postgres_url,
        "--work-dir",
        str(work_dir),
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=STORE_BENCH_TIMEOUT_S, check=True
        )
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, json.JSONDecodeError, IndexError) as exc:
        why = f"{type(exc).__name__}: {exc}"[:300]
        return {b: StoreFigure(b, None, n, 0, 0, None, 0, reason=why) for b in backends}
    return {name: StoreFigure(**fig) for name, fig in data.items()}
