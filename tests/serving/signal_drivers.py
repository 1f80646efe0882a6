"""Programs the signal tests start and signal: `python -m tests.serving.signal_drivers KIND ...`.

- `fleet MODE GRACE_S`: a `ProcessFleet` with a thread started after it (as the demo's asyncio
  and torch threads are) and two children, each with a grandchild in its group; one ignores
  SIGTERM (so only SIGKILL after the grace ends it). MODE `wait`: the main thread waits in
  `wait_any`; `asyncio`: the children are started inside `asyncio.run`, which then sleeps.
  Prints `ready`, and exits 128+N on signal N.
- `supervisor ARGS`, `flywheel`, `bench_kv ARGS`: those programs' own `main`, with vLLM's
  command swapped for `tests.serving.fake_vllm` (so no vLLM boots).
"""

from __future__ import annotations

import asyncio
import faulthandler
import runpy
import signal
import sys
import threading
import time

from serving.processes import Interrupted, ProcessFleet
from serving.vllm_config import VllmLaunchConfig
from tests.serving.process_tree import REPO

WITH_GRANDCHILD = ["sh", "-c", "sleep 3600 & exec sleep 3600"]
IGNORES_SIGTERM = ["sh", "-c", "trap '' TERM; sleep 3600 & exec sleep 3600"]


def fleet(mode: str, grace_s: float) -> int:
    with ProcessFleet(grace_s=grace_s) as children:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()

        def start() -> None:
            children.spawn(WITH_GRANDCHILD, name="with a grandchild")
            children.spawn(IGNORES_SIGTERM, name="ignores SIGTERM")
            print("ready", flush=True)

        async def start_and_sleep() -> None:
            start()
            await asyncio.sleep(3600)

        try:
            if mode == "asyncio":
                asyncio.run(start_and_sleep())
            else:
                start()
                children.wait_any()
        except Interrupted as stop:
            print(f"interrupted by {stop}", flush=True)
            return stop.exit_code
    return 0


def fake_vllm_command(self: VllmLaunchConfig) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.serving.fake_vllm",
        "--host",
        self.host,
        "--port",
        str(self.port),
        "--served-model-name",
        self.served_model_name,
    ]


def main() -> int:
    # Where the program is, should a test find it still running after its stop signal.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    kind, args = sys.argv[1], sys.argv[2:]
    if kind == "fleet":
        return fleet(args[0], float(args[1]))
    VllmLaunchConfig.command = fake_vllm_command  # type: ignore[method-assign]
    if kind == "supervisor":
        from serving.supervisor import main as supervisor_main

        return supervisor_main(args)
    if kind == "bench_kv":
        from loadtests.bench.kv.run import main as bench_kv_main

        return bench_kv_main(args)
    if kind == "flywheel":
        sys.argv = [str(REPO / "scripts" / "flywheel.py")]
        runpy.run_path(sys.argv[0], run_name="__main__")
    raise SystemExit(f"unknown driver {kind!r}")


if __name__ == "__main__":
    raise SystemExit(main())
