"""`make flywheel SEEDS=0,1,2`: the flywheel once per seed, then one JSON line over all of them.

Each seed runs ``scripts/flywheel.py`` (same preset: ``FLYWHEEL_QUICK`` / ``FLYWHEEL_SMOKE``
pass through) in a child process with ``FLYWHEEL_SEED`` set and its own output folder,
``$FLYWHEEL_DIR/seeds-<time>/seed-<k>`` (``FLYWHEEL_DIR`` defaults to ``.cache/flywheel``); its
output goes to ``flywheel.log`` there, and a line per seed here. The summary
(``rl_loop.seed_report``: minima and maxima over every round of every seed) is written to
``seeds.json`` in that folder and printed as the last line. A seed that fails stops the run
(exit status of the child). SIGINT and SIGTERM are passed on to the running child, which
stops every process it started; then the runner stops too.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from rl_loop.seed_report import seed_summary  # noqa: E402

CACHE = Path(os.environ.get("SWITCHYARD_CACHE", REPO / ".cache"))
DEFAULT_SEEDS = "0,1,2"


def _forward(child: subprocess.Popen[bytes], signum: int, _frame: object) -> None:
    child.send_signal(signum)


def main() -> int:
    seeds = [int(s) for s in os.environ.get("SEEDS", DEFAULT_SEEDS).replace(" ", "").split(",")]
    base = Path(os.environ.get("FLYWHEEL_DIR", CACHE / "flywheel"))
    out = base / f"seeds-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True)
    reports = []
    for seed in seeds:
        folder = out / f"seed-{seed}"
        folder.mkdir()
        env = {**os.environ, "FLYWHEEL_SEED": str(seed), "FLYWHEEL_DIR": str(folder)}
        started = time.monotonic()
        print(f"[flywheel-seeds] seed {seed}: running; log {folder / 'flywheel.log'}", flush=True)
        with (folder / "flywheel.log").open("w") as log:
            child = subprocess.Popen(
                [sys.executable, str(REPO / "scripts" / "flywheel.py")],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, functools.partial(_forward, child))
            code = child.wait()
        if code != 0:
            print(f"[flywheel-seeds] seed {seed} stopped ({code})", flush=True)
            return code
        report = json.loads((folder / "report.json").read_text())
        reports.append(report)
        accept = report["targets"]["overall_accept_every_round"]
        print(
            f"[flywheel-seeds] seed {seed}: {time.monotonic() - started:.0f}s, accept / "
            f"frontier-only per round {accept['ratio_per_round']}",
            flush=True,
        )
    summary = {"folder": str(out), **seed_summary(reports)}
    (out / "seeds.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
