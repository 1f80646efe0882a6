"""`python scripts/paired_frontier.py SEEDS_FOLDER`: each flywheel round's accept against
frontier-only on the same requests, after the run.

The flywheel judges a round's accept against its seed's round-0 frontier accept
(``rl_loop.report``): other requests, so a round whose tasks the frontier happens to answer
worse reads as the loop's loss. The frontier simulator's answer to a task is a function of its
seed, the request and the task id (``loadtests.frontier_sim.oracle``), so the frontier-only
policy's accept on a round's exact requests can be measured afterwards: the same IDE client,
with the round's seed, count, concurrency and answer cap, sends the round's tasks straight to a
simulator configured as the run's was (no gateway, nothing recorded, no feedback posted).

Checked before it is used: for every request the run served at the frontier, the replay's
verdict of the same task must equal the recorded one (``agreement``; a mismatch means the
replay is not the run's frontier, and the figures are not printed as paired).

Per seed and round: the recorded accept, the round-0 ratio the run reported, the paired
frontier-only accept and the ratio to it. The last line is one JSON object (min over every
round of every seed of both ratios).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from loadtests.frontier_sim.config import SimulatorConfig  # noqa: E402
from loadtests.frontier_sim.runner import run_in_thread  # noqa: E402
from loadtests.ide_client import IdeClientConfig, run_ide_client  # noqa: E402
from rl_loop.labels import LABELS_FILE, load_labels  # noqa: E402
from rl_loop.outcomes import verdict_of  # noqa: E402
from traffic.store import StoreConfig, open_store  # noqa: E402

sys.path.insert(0, str(REPO / "scripts"))
from flywheel_traffic import SEED_STRIDE, TRAFFIC_SEED  # noqa: E402


async def _recorded(run_dir: Path) -> dict[str, tuple[str, bool]]:
    """task id -> (route target, verdict) of the run's labelled, judged requests."""
    labels = load_labels(run_dir / LABELS_FILE)
    store = open_store(StoreConfig(url=f"sqlite:///{run_dir / 'traffic.db'}"))
    await store.connect()
    found: dict[str, tuple[str, bool]] = {}
    try:
        async for row in store.iter_inferences():
            label = labels.get(row.inference.id)
            verdict = verdict_of(row)
            if label and verdict is not None and row.inference.route_target:
                found[label["task_id"]] = (row.inference.route_target, verdict)
    finally:
        await store.close()
    return found


async def seed_rounds(seed_dir: Path) -> dict[str, Any]:
    report = json.loads(await asyncio.to_thread((seed_dir / "report.json").read_text))
    settings, seed = report["settings"], int(report["seed"])
    run_dir = Path(report["run_dir"])
    recorded = await _recorded(run_dir)
    sim_config = SimulatorConfig(
        oracle_accuracy=settings["oracle_accuracy"],
        agent_success_rate=settings["agent"]["success_rate"],
    )
    rounds, same, differ = [], 0, 0
    with run_in_thread(sim_config) as sim:
        for figures in report["rounds"]:
            r = int(figures["round"])
            config = IdeClientConfig(
                base_url=sim.base_url,
                n=int(settings["tasks_per_round"]),
                seed=TRAFFIC_SEED + r + SEED_STRIDE * seed,
                concurrency=int(settings["client_concurrency"]),
                max_tokens=int(settings["max_tokens"]),
                oracle_url=sim.base_url,
                send_feedback=False,
            )
            stats = await run_ide_client(config)
            for sent in stats.sent.values():
                target, verdict = recorded.get(sent.task_id, ("", None))
                if target == "frontier":
                    same += verdict == sent.verdict.passed
                    differ += verdict != sent.verdict.passed
            paired = stats.total().accept_rate
            accept = figures["overall"]["accept_overall"]
            rounds.append(
                {
                    "round": r,
                    "accept": accept,
                    "paired_frontier_only": paired,
                    "ratio_paired": accept / paired if paired else None,
                    "replay_errors": stats.total().errors,
                }
            )
    ratio0 = report["targets"]["overall_accept_every_round"]["ratio_per_round"]
    for one, old in zip(rounds, ratio0, strict=True):
        one["ratio_round0"] = old
    return {"seed": seed, "rounds": rounds, "agreement": {"same": same, "differ": differ}}


async def main(folder: Path) -> dict[str, Any]:
    done = [d for d in sorted(await asyncio.to_thread(folder.glob, "seed-*"))]
    done = [d for d in done if await asyncio.to_thread((d / "report.json").exists)]
    seeds = [await seed_rounds(d) for d in done]
    for s in seeds:
        for r in s["rounds"]:
            print(
                f"seed {s['seed']} round {r['round']}: accept {r['accept']:.3f}, "
                f"/ round-0 frontier {r['ratio_round0']:.4f}, paired frontier-only "
                f"{r['paired_frontier_only']:.3f}, / paired {r['ratio_paired']:.4f}",
                flush=True,
            )
    agree = all(s["agreement"]["differ"] == 0 and s["agreement"]["same"] > 0 for s in seeds)
    paired = [r["ratio_paired"] for s in seeds for r in s["rounds"]]
    old = [r["ratio_round0"] for s in seeds for r in s["rounds"]]
    return {
        "folder": str(folder),
        "replay_agrees_with_record": agree,
        "agreement": [s["agreement"] for s in seeds],
        "ratio_round0_min": min(old),
        "ratio_paired_min": min(paired) if agree else None,
        "met_paired": agree and min(paired) >= 0.95,
        "seeds": seeds,
    }


if __name__ == "__main__":
    summary = asyncio.run(main(Path(sys.argv[1])))
    print(json.dumps(summary), flush=True)
