"""`make flywheel`: the whole loop on one machine, in one readable script.

    model    the tiny Qwen3-MoE, base-trained on stdlib code (serving.train_base, cached)
    start    vLLM replica(s) in dev mode (weight reloads), the frontier simulator with its task
             oracle, the gateway (SQLite store, learned routing with an exploration share,
             shadow answers for a share of frontier-served requests, auth off)
    round r  traffic: the simulated IDE sends N tasks of the fixed family mix, posts feedback
             record:  the gateway records every exchange, shadow answer and feedback
             loop:    rl_loop: datasets -> RL + SFT -> gate -> release or swap -> refit routing,
                      while a trickle of IDE traffic flows through the swap
             agents:  beside the chat mix, a batch of agent episodes (loadtests.agent: mixed
                      task kinds, Chat Completions and Responses, streamed and not) through the
                      same gateway, the simulator playing a competent agent; each verdict posted
                      as feedback; figures rebuilt from the record (rl_loop.agent_report)
             gate:    the candidate also plays held-out agent tasks in the sandbox against the
                      served model (rl_loop.agent_round; recorded, enforced when configured)
    last     one more traffic round measures the final state
    report   .cache/flywheel/report.{json,txt}, curves.png and agent_curves.png; the last line
             is one JSON summary

The agent episodes are kept out of the chat loop's datasets
(``rl_loop.agent_round.without_episodes``): the chat candidates train on chat traffic. The
routing refit reads them, each step credited from its episode's verdict
(``rl_loop.episode_credit``), together with the agent gate's held-out steps of the served
weights (``rl_loop.agent_evidence``), so the scorer learns where agent steps may go local, and so
does the agent distillation when ``loop.agent_distill`` is on (``rl_loop.agent_data``).

Presets: full (default), `FLYWHEEL_QUICK=1` (about 20 minutes on 2 cores), `FLYWHEEL_SMOKE=1`
(one round on minimal settings, for the test). With two replicas each candidate is released as a
canary decided by users' verdicts (rl_loop.release_stage, scripts/flywheel_release.py);
`FLYWHEEL_RELEASE=0` swaps every replica at once instead. The task verifier (tasks.ide) is injected
into the RL loop as a plain callable: the RL loop never imports the task families. SIGTERM or
SIGINT, at any point, stops every process the run started (`serving.processes.ProcessFleet`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import secrets
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field
from transformers.utils import logging as transformers_logging

from loadtests.ide_client import RunStats
from rl_loop.agent.sandbox_environment import SandboxEnvironment
from rl_loop.agent_report import (
    agent_targets,
    format_agent_table,
)
from rl_loop.agent_round import AgentGateRound, without_episodes
from rl_loop.config import LoopConfig
from rl_loop.evaluate import AnswerCache
from rl_loop.labels import LABELS_FILE, Labels, with_labels
from rl_loop.loop import Services, prepare_candidate
from rl_loop.model_registry import record_checkpoint
from rl_loop.ope_check import round_estimate
from rl_loop.outcomes import VerdictCache
from rl_loop.replay import VERDICTS_FILE
from rl_loop.report import (
    RoundFigures,
    check_targets,
    round_figures,
    window_figures,
    write_report,
)
from rl_loop.ship import ship_candidate
from serving.base_checkpoints import base_training_config, ensure_trained, find_trained
from serving.build import ensure_demo_model, read_version
from serving.copy_curriculum import COPY_RECIPE, CopySpec
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME
from serving.processes import Child, Interrupted, ProcessFleet
from serving.reload_worker import RELOAD_WORKER_EXTENSION
from serving.replica import VllmReplica, find_free_port
from serving.vllm_config import VllmLaunchConfig
from tasks.agent.tasks import heldout_task_ids
from tasks.ide import FAMILIES, MIX
from tasks.ide.mix import OLD_MIX
from traffic.store import StoreConfig, open_store

REPO = Path(__file__).resolve().parents[1]
# The sibling modules of this script, also when it runs through runpy (the signal tests).
sys.path.insert(0, str(Path(__file__).resolve().parent))
import flywheel_traffic as draws  # noqa: E402
from flywheel_agent import FRONTIER_MODEL, AgentWork, AgentWorkload, agent_traffic  # noqa: E402
from flywheel_release import (  # noqa: E402
    ReleaseWorkload,
    gate_text,
    injected_candidate,
    next_trunk,
    release_record,
    release_traffic,
    sabotage_family,
)
from flywheel_tasks import heldout_items, strict_verify, verify  # noqa: E402
from flywheel_traffic import Pace, keep_labels, settle, traffic, trickle  # noqa: E402

CACHE = Path(os.environ.get("SWITCHYARD_CACHE", REPO / ".cache"))
OUT = Path(os.environ.get("FLYWHEEL_DIR", CACHE / "flywheel"))


class Settings(BaseModel):
    """A flywheel run; each default is defined here once, presets override some."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = Field(
        default=0,
        ge=0,
        description="Draws the traffic, the agent episodes and the training (FLYWHEEL_SEED); "
        "the same workload: seed 0 is the issue-14 run's draw, others shift every seed by "
        "flywheel_traffic.SEED_STRIDE.",
    )
    rounds: int = Field(default=4, ge=0, description="Training rounds (one more traffic round).")
    tasks_per_round: int = Field(default=320, ge=1, description="IDE tasks sent per round.")
    replicas: int = Field(default=2, ge=1, le=2, description="vLLM replicas (at most 2 here).")
    pretrain_steps: int = Field(
        default=1200, ge=0, description="Base training on stdlib code first (cached); 0: none."
    )
    pretrain_seq_len: int = Field(default=128, ge=16, description="Base training window.")
    pretrain_copy: CopySpec = Field(
        default=COPY_RECIPE, description="The base's copy curriculum (serving.copy_curriculum)."
    )
    client_concurrency: int = Field(default=6, ge=1)
    max_tokens: int = Field(default=160, ge=8, description="Answer cap of IDE requests.")
    shadow_share: float = Field(default=0.3, ge=0, le=1)
    exploration_share: float = Field(default=0.05, ge=0, le=1)
    quality_target: float = Field(default=0.95, gt=0, le=1)
    min_samples: int = Field(default=20, ge=1)
    oracle_accuracy: float = Field(default=0.97, ge=0, le=1)
    frontier_ttft_ms: float = Field(default=400.0, ge=0, description="Simulated frontier delay.")
    heldout_per_family: int = Field(default=24, ge=1, description="Gate's held-out tasks.")
    trickle_concurrency: int = Field(default=2, ge=1, description="Traffic during swaps.")
    local_prices: tuple[float, float] = (0.5, 2.5)  # USD per M tokens in / out (Composer-like)
    frontier_prices: tuple[float, float] = (5.0, 25.0)  # (Opus-class)
    loop: dict[str, Any] = Field(default_factory=dict, description="LoopConfig overrides.")
    agent: AgentWorkload = Field(default_factory=AgentWorkload)
    release: ReleaseWorkload = Field(default_factory=ReleaseWorkload)


PRESETS: dict[str, dict[str, Any]] = {
    "full": {},
    "quick": {
        "rounds": 3,
        "tasks_per_round": 500,
        "replicas": 2,
        "client_concurrency": 8,
        "heldout_per_family": 24,
        "loop": {
            "sft": {"steps": 400, "lr": 1e-3, "replay_windows": 16},
            "rl": {"prompts": 12, "samples_per_prompt": 4, "steps": 4},
            "gate": {"max_new_tokens": 80, "record_eval_per_family": 8},
        },
        "agent": {"episodes": 20, "gate": {"episodes": 4, "max_steps": 4, "max_new_tokens": 96}},
        "release": {"tasks": 1500},
    },
    "smoke": {
        "rounds": 1,
        "tasks_per_round": 24,
        "replicas": 1,
        "pretrain_steps": 0,
        "max_tokens": 48,
        "heldout_per_family": 1,
        "frontier_ttft_ms": 0.0,
        "loop": {
            "sft": {"steps": 6, "batch_size": 4},
            "rl": {"prompts": 2, "samples_per_prompt": 2, "steps": 1, "max_new_tokens": 16},
            "gate": {"max_new_tokens": 16, "record_eval_per_family": 1, "ppl_windows": 2},
        },
        "agent": {
            "episodes": 4,
            "max_steps": 6,
            "max_tokens": 32,
            "gate": {"episodes": 1, "max_steps": 2, "max_new_tokens": 16},
        },
    },
}


def log(message: str) -> None:
    print(f"[flywheel {time.strftime('%H:%M:%S')}] {message}", flush=True)


@functools.lru_cache(maxsize=16384)
# ---------------------------------------------------------------- model and services


def base_model(pretrain_steps: int, seq_len: int, copy: CopySpec) -> Path:
    """The tiny random init, base-trained for ``pretrain_steps`` (reused when already done)."""
    init = ensure_demo_model(CACHE, progress=True)
    if pretrain_steps == 0:
        return init
    config = base_training_config(pretrain_steps, seq_len, copy)
    if find_trained(init.parent, init, config) is None:
        log(f"base training {pretrain_steps} steps on stdlib code (once; cached) ...")
    return ensure_trained(init, init.parent, config, progress=True)


def gateway_config(run: Path, replicas: list[str], sim_url: str, s: Settings) -> dict[str, Any]:
    return {
        "gateway": {"listen": {"host": "127.0.0.1", "port": find_free_port()}},
        "backends": {
            "local": {
                "kind": "vllm",
                "model": LOCAL_MODEL_NAME,
                "replicas": replicas,
                "input_usd_per_mtok": s.local_prices[0],
                "output_usd_per_mtok": s.local_prices[1],
            },
            "frontier": {
                "kind": "litellm",
                "model": f"openai/{FRONTIER_MODEL}",
                "api_base": sim_url + "/v1",
                "input_usd_per_mtok": s.frontier_prices[0],
                "output_usd_per_mtok": s.frontier_prices[1],
            },
        },
        "routing": {
            "version": "flywheel-v1",
            "default": "frontier",
            "aliases": {"auto": None},
            "fallbacks": {"local": ["frontier"]},
            "learned": {
                "local_target": "local",
                "frontier_target": "frontier",
                "quality_target": s.quality_target,
                "exploration_share": s.exploration_share,
                "min_samples": s.min_samples,
                "state_file": str(run / "learned_state.json"),
            },
        },
        "shadow": {"share": s.shadow_share, "target": "local", "max_in_flight": 16},
        # the release's sequential test promotes as well as rolls back (rl_loop.release_stage)
        "release": {"auto_promote": s.release.enabled, "margin": s.release.margin},
        "store": {"url": f"sqlite:///{run / 'traffic.db'}", "spool_dir": str(run / "spool")},
        "auth": {"required": False},
    }


def start_python(fleet: ProcessFleet, name: str, args: list[str], log: Path, token: str) -> Child:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", ADMIN_TOKEN_ENV: token}
    return fleet.spawn([sys.executable, *args], name=name, log_path=log, env=env, cwd=REPO)


# ---------------------------------------------------------------- the run


async def run(s: Settings, preset: str, fleet: ProcessFleet) -> dict[str, Any]:
    started = time.monotonic()
    run_dir = OUT / f"run-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    run_dir.mkdir(parents=True)
    log(
        f"preset {preset}, seed {s.seed}: {s.rounds} rounds x {s.tasks_per_round} tasks; "
        f"output {run_dir}"
    )
    served = base_model(s.pretrain_steps, s.pretrain_seq_len, s.pretrain_copy)
    release = s.release.loop_release()
    loop_config = LoopConfig.model_validate(
        {"work_dir": run_dir, "threads": os.cpu_count(), "seed": s.seed, "release": release}
        | s.loop
    )
    token = secrets.token_urlsafe(24)
    replicas = [
        VllmReplica(
            VllmLaunchConfig(
                model_dir=served,
                cache_dir=CACHE,
                served_model_name=LOCAL_MODEL_NAME,
                port=find_free_port(),
                enforce_eager=True,
                max_num_seqs=16,
                dev_mode=True,
                worker_extension_cls=RELOAD_WORKER_EXTENSION,
            ),
            log_path=run_dir / f"vllm-{i}.log",
            fleet=fleet,
        )
        for i in range(s.replicas)
    ]
    store = open_store(StoreConfig(url=f"sqlite:///{run_dir / 'traffic.db'}"))
    try:
        log(f"starting {s.replicas} vLLM replica(s), the frontier simulator and the gateway ...")
        for r in replicas:
            r.start()
        sim_port = find_free_port()
        sim_args = ["-m", "loadtests.frontier_sim", "--port", str(sim_port), "--oracle-accuracy"]
        sim_args += [str(s.oracle_accuracy), "--ttft-ms", str(s.frontier_ttft_ms)]
        sim_args += ["--agent-success-rate", str(s.agent.success_rate)]
        sim = start_python(fleet, "frontier simulator", sim_args, run_dir / "sim.log", token)
        sim_url = f"http://127.0.0.1:{sim_port}"
        fleet.wait_http(sim, sim_url + "/health", timeout_s=60)
        for r in replicas:
            await r.wait_ready(timeout=600)
        cfg = gateway_config(run_dir, [r.base_url for r in replicas], sim_url, s)
        (run_dir / "switchyard.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        gateway_args = ["-m", "gateway", "--config", str(run_dir / "switchyard.yaml")]
        gateway = start_python(fleet, "gateway", gateway_args, run_dir / "gateway.log", token)
        base = f"http://127.0.0.1:{cfg['gateway']['listen']['port']}"
        fleet.wait_http(gateway, base + "/ready", timeout_s=120)
        await store.connect()
        await record_checkpoint(store, served, "promoted")
        labels: Labels = {}
        gate = None
        if s.agent.episodes and s.agent.gate.episodes:
            environment = await asyncio.to_thread(SandboxEnvironment)
            tasks = heldout_task_ids(s.agent.gate.episodes, seed=1)
            gate = AgentGateRound(environment, tasks, s.agent.gate, device=loop_config.device)
        agent = AgentWork(store, set(), gate)
        services = Services(
            store=without_episodes(with_labels(store, labels), agent.hidden),
            whole_store=with_labels(store, labels),
            replicas=tuple(r.base_url for r in replicas),
            gateway_url=base,
            admin_token=token,
            state_file=run_dir / "learned_state.json",
        )
        log(f"up in {time.monotonic() - started:.0f}s; gateway {base}")
        return await rounds(
            s, loop_config, services, served, run_dir, started, preset, sim_url, labels, agent
        )
    finally:
        # Here too, not only when main()'s fleet block ends: on a signal, asyncio.run would
        # first wait for the default executor's threads (a training step can take minutes).
        fleet.stop_all()
        await store.close()


async def rounds(
    s: Settings,
    loop_config: LoopConfig,
    services: Services,
    served: Path,
    run_dir: Path,
    started: float,
    preset: str,
    sim_url: str,
    labels: Labels,
    agent: AgentWork,
) -> dict[str, Any]:
    labels_file = run_dir / LABELS_FILE
    learnable = sorted(n for n, f in FAMILIES.items() if f.learnable)
    heldout = heldout_items(s.heldout_per_family)
    cache = VerdictCache(run_dir / VERDICTS_FILE)
    answers: AnswerCache = {}
    figures: list[RoundFigures] = []
    trunk: Path | None = None  # training's start when not the served weights (next_trunk)
    loop_results: list[dict[str, Any]] = []
    swap_failures = 0
    policy = "flywheel-v1+unfitted"
    pace = Pace(s.client_concurrency, s.client_concurrency, s.max_tokens)
    swap_pace = Pace(s.trickle_concurrency, s.trickle_concurrency, s.max_tokens)
    for r in range(s.rounds + 1):
        t0 = datetime.now(UTC)
        shift = draws.SEED_STRIDE * s.seed
        stats = await traffic(
            services.gateway_url, sim_url, s.tasks_per_round, draws.TRAFFIC_SEED + r + shift, pace
        )
        keep_labels(labels, stats, labels_file)
        await settle(services.store, t0, expect=stats.sent)
        t1 = datetime.now(UTC)
        window = await window_figures(services.store, t0, t1)
        errors = stats.total().errors
        version = read_version(served).version_id
        figures.append(round_figures(r, version, policy, window, learnable, errors))
        o = figures[-1].overall
        log(
            f"round {r} traffic: {o['requests']} requests, local {o['local_share']:.0%}, accept "
            f"{o['accept_overall']:.3f}, ${o['cost_per_1k_usd']:.3f}/1k, p50 "
            f"{o['latency_p50_ms']:.0f} ms, client errors {errors}"
        )
        if s.agent.episodes:
            a = await agent_traffic(
                agent, services.gateway_url, sim_url, r, s.agent, settle, seed=500 + r + shift
            )
            log(f"round {r} agents ({a.client['failed_requests']} failed requests):")
            print(format_agent_table([a]), flush=True)
        if r == s.rounds:
            break
        candidate = await prepare_candidate(
            r,
            served,
            services,
            loop_config,
            verify=verify,
            strict_verify=strict_verify,
            heldout=heldout,
            answers=answers,
            trunk_dir=trunk,
        )
        log(gate_text(candidate))
        if agent.gate is not None:
            decision = await agent.gate.gate(candidate.served_dir, candidate.candidate_dir)
            if agent.figures:
                agent.figures[-1].gate = decision
            log(f"round {r} {decision['text']}")
            if decision["enforced"] and decision["decision"] == "reject":
                candidate = dataclasses.replace(candidate, passed=False)
        releasing = s.release.enabled and s.replicas > 1
        injected: dict[str, Any] = {}
        if releasing and r == s.release.inject_round:
            candidate, injected = await asyncio.to_thread(
                injected_candidate, candidate, sabotage_family(learnable), learnable,
                loop_config, s.release, heldout, answers,
            )  # fmt: skip
            log(f"round {r}: injected {injected['checkpoint']}, held-out accept {injected}")
        sent: list[RunStats] = []
        drive = release_traffic(
            services.gateway_url, sim_url, s.release, 9000 + r + shift, pace, sent,
            lambda x: keep_labels(labels, x, labels_file), services.store,
        )  # fmt: skip
        shipped_at = datetime.now(UTC)
        stop = asyncio.Event()
        background = asyncio.create_task(
            trickle(services.gateway_url, sim_url, stop, 7000 + r + shift, swap_pace)
        )
        try:
            served = await ship_candidate(
                candidate,
                services,
                loop_config,
                verify=verify,
                cache=cache,
                agent_evidence=agent.gate.step_outcomes if agent.gate is not None else None,
                drive=drive if releasing else None,
            )
        finally:
            stop.set()
            swap_stats = await background
            for stats in (swap_stats, *sent):
                keep_labels(labels, stats, labels_file)
        total = swap_stats.total()
        swap_failures += total.errors + sum(x.total().errors for x in sent)
        trunk = next_trunk(trunk, candidate, candidate.result.promoted, bool(injected))
        if "release" in candidate.result.swap:
            await settle(services.store, shipped_at)
            figures[-1].release = await release_record(
                services.store, shipped_at, r, candidate.result.swap["release"], injected, sent
            )
            log(f"round {r} release: {figures[-1].release}")
        figures[-1].swap_traffic = {"requests": total.sent, "failed": total.errors}
        policy = f"flywheel-v1+{candidate.result.refit.get('version')}"
        figures[-1].ope = await round_estimate(
            services.store, run_dir / "switchyard.yaml", services.state_file, cache, t0,
            candidate.result.served_after or None,  # the weights the next round serves
        )  # fmt: skip
        loop_results.append(candidate.result.to_json())
        log(
            f"round {r} shipped: promoted={candidate.result.promoted}, serving "
            f"{candidate.result.served_after}; {total.sent} requests during the swap, "
            f"{total.errors} failed; policy {policy}"
        )
    mixes = {"mix": MIX, "old_mix_before_2026_11_23": OLD_MIX}
    targets = check_targets(figures, learnable, s.exploration_share, swap_failures, mixes)
    if agent.figures:
        targets["agent"] = agent_targets(agent.figures)
    header = {"preset": preset, "seed": s.seed, "settings": s.model_dump(), "run_dir": str(run_dir)}
    wall = time.monotonic() - started
    folders = [run_dir, OUT]
    return write_report(header, figures, loop_results, targets, folders, wall, agent.figures)


def main() -> int:
    # First, before any thread or child exists: SIGTERM and SIGINT stop every child alike.
    with ProcessFleet() as fleet:
        quick = "quick" if os.environ.get("FLYWHEEL_QUICK") else "full"
        preset = "smoke" if os.environ.get("FLYWHEEL_SMOKE") else quick
        seed = int(os.environ.get("FLYWHEEL_SEED", "0"))
        # FLYWHEEL_RELEASE=0: every replica swapped at once, routing reloaded for all traffic
        releasing = os.environ.get("FLYWHEEL_RELEASE", "1") != "0"
        release = {**PRESETS[preset].get("release", {}), "enabled": releasing}
        settings = Settings.model_validate({**PRESETS[preset], "seed": seed, "release": release})
        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]
        logging.basicConfig(format="[%(name)s %(asctime)s] %(message)s", datefmt="%H:%M:%S")
        for name in ("rl_loop", "serving.hotswap"):
            logging.getLogger(name).setLevel(logging.INFO)
        OUT.mkdir(parents=True, exist_ok=True)
        try:
            summary = asyncio.run(run(settings, preset, fleet))
        except Interrupted as stop:
            log(f"stopped by {stop}")
            return stop.exit_code
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
