"""Weight hot-swap on two real vLLM CPU replicas behind a real gateway, under streaming load.

The replicas are started by the supervisor (one core each, dev mode with the reload extension);
the new weights come from a short base-training run (cached under the project cache).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from safetensors.torch import load_file, save_file

from gateway.config import parse_config
from serving.base_checkpoints import ensure_trained
from serving.build import (
    copy_tokenizer_files,
    ensure_demo_model,
    finalize_checkpoint,
    read_version,
    staging_dir,
)
from serving.hotswap import HotSwapConfig, SwapReport, publish_weights
from serving.logprob_probe import checkpoint_probe
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME
from serving.prefix_cache_check import CacheCheckSettings, PrefixCacheCheck
from serving.reload_worker import CLEAR_METHOD, RELOAD_METHOD, RELOAD_WORKER_EXTENSION
from serving.supervisor import ReplicaSupervisor, SupervisorConfig
from serving.swap_checks import HotSwapError, ProbeTolerance, compare_probe, probe_tolerance
from serving.train_base import QUICK_TRAINING
from serving.vllm_config import VllmLaunchConfig
from tests.fixtures.gateway_fixture import GatewayThread
from tests.fixtures.vllm_fixture import cache_dir

pytestmark = pytest.mark.slow

ADMIN_TOKEN = "hotswap-test-admin"


@dataclass(frozen=True)
class Outcome:
    started: float
    ended: float
    status: int
    versions: list[str]
    completed: bool
    error: str | None = None


@pytest.fixture(scope="module")
def admin_token() -> Iterator[str]:
    previous = os.environ.get(ADMIN_TOKEN_ENV)
    os.environ[ADMIN_TOKEN_ENV] = ADMIN_TOKEN
    yield ADMIN_TOKEN
    if previous is None:
        os.environ.pop(ADMIN_TOKEN_ENV, None)
    else:
        os.environ[ADMIN_TOKEN_ENV] = previous


@pytest.fixture(scope="module")
def base_dir() -> Path:
    return ensure_demo_model(cache_dir())


@pytest.fixture(scope="module")
def trained_dir(base_dir: Path) -> Path:
    return ensure_trained(base_dir, cache_dir() / "models" / "tiny-trained", QUICK_TRAINING)


@pytest.fixture(scope="module")
async def pool(base_dir: Path) -> AsyncIterator[ReplicaSupervisor]:
    template = VllmLaunchConfig(
        model_dir=base_dir,
        cache_dir=cache_dir(),
        served_model_name=LOCAL_MODEL_NAME,
        enforce_eager=True,
        max_num_seqs=16,
        dev_mode=True,
        worker_extension_cls=RELOAD_WORKER_EXTENSION,
    )
    supervisor = ReplicaSupervisor(
        template, SupervisorConfig(replicas=2, max_consecutive_failures=2)
    )
    await supervisor.start()
    try:
        yield supervisor
    finally:
        await supervisor.stop()


@pytest.fixture(scope="module")
def gateway(pool: ReplicaSupervisor, base_dir: Path, admin_token: str) -> Iterator[GatewayThread]:
    config = parse_config(
        {
            "backends": {
                "local": {
                    "kind": "vllm",
                    "model": LOCAL_MODEL_NAME,
                    "replicas": pool.urls,
                    "weights_version": read_version(base_dir).version_id,
                }
            },
            "routing": {"default": "local", "aliases": {LOCAL_MODEL_NAME: "local"}},
            "store": {"enabled": False},
            "auth": {"required": False},
        }
    )
    gw = GatewayThread(config).start()
    yield gw
    gw.stop()


def swap_config(gateway: GatewayThread) -> HotSwapConfig:
    return HotSwapConfig(gateway_url=gateway.base_url, admin_token=ADMIN_TOKEN, drain_timeout_s=60)


async def stream_once(client: httpx.AsyncClient, n: int) -> Outcome:
    started = time.monotonic()
    body = {
        "model": LOCAL_MODEL_NAME,
        "messages": [{"role": "user", "content": f"def task_{n}(x):"}],
        "max_tokens": 24,
        "temperature": 0,
        "stream": True,
    }
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            text = (await response.aread()).decode()
            versions = response.headers.get_list("x-switchyard-weights-version")
            return Outcome(
                started,
                time.monotonic(),
                response.status_code,
                versions,
                text.rstrip().endswith("data: [DONE]"),
                None if response.status_code == 200 else text[:300],
            )
    except httpx.HTTPError as exc:
        return Outcome(started, time.monotonic(), 0, [], False, repr(exc))


async def run_load(url: str, stop: asyncio.Event, workers: int = 4) -> list[Outcome]:
    outcomes: list[Outcome] = []

    async def worker(w: int) -> None:
        n = 0
        while not stop.is_set():
            outcomes.append(await stream_once(client, w * 10_000 + n))
            n += 1

    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        await asyncio.gather(*(worker(w) for w in range(workers)))
    return outcomes


async def publish_under_load(
    gateway: GatewayThread, new: Path, old: Path
) -> tuple[SwapReport, list[Outcome], float, float]:
    stop = asyncio.Event()
    load = asyncio.create_task(run_load(gateway.base_url, stop))
    await asyncio.sleep(3)
    swap_started = time.monotonic()
    try:
        report = await publish_weights(new, old, gateway_urls(gateway), swap_config(gateway))
    finally:
        swap_ended = time.monotonic()
        await asyncio.sleep(3)
        stop.set()
        outcomes = await load
    return report, outcomes, swap_started, swap_ended


def gateway_urls(gateway: GatewayThread) -> list[str]:
    return list(gateway.state.targets.pools()["local"].replicas)


def served_versions(gateway: GatewayThread) -> set[str | None]:
    return {r.weights_version for r in gateway.state.targets.pools()["local"].replicas.values()}


async def test_supervisor_binds_each_replica_to_its_own_core(pool: ReplicaSupervisor) -> None:
    status = pool.status()
    assert [s.state for s in status] == ["ready", "ready"]
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        assert [s.placement for s in status] == [f"cpu:{cores[0]}", f"cpu:{cores[1]}"]
    assert all(s.pid is not None and s.restarts == 0 for s in status)


async def test_the_cache_check_fails_on_blocks_a_reset_left_behind(
    pool: ReplicaSupervisor, base_dir: Path, tmp_path: Path
) -> None:
    """On a real replica: the check prompt's blocks of the old weights, still cached after a
    reload (a reset that missed them; here none is sent), fail the check; after a reset it
    passes, its cold answer computed afresh and its warm one read from the cache."""
    url = pool.urls[1]
    changed, served = (str(d.resolve()) for d in (corrupted_copy(base_dir, tmp_path), base_dir))
    probe, bound = checkpoint_probe(base_dir), ProbeTolerance()

    async def reload(client: httpx.AsyncClient, checkpoint: str) -> None:
        rpc = {"method": RELOAD_METHOD, "args": [checkpoint]}
        assert (await client.post(f"{url}/collective_rpc", json=rpc)).status_code == 200

    async def reset(client: httpx.AsyncClient) -> None:
        response = await client.post(f"{url}/reset_prefix_cache?reset_external=true")
        assert response.json().get("success"), response.text

    async with httpx.AsyncClient(timeout=120) as client:
        check = PrefixCacheCheck(
            client, LOCAL_MODEL_NAME, probe.prompt_token_ids, CacheCheckSettings()
        )
        try:
            await check.seed_cache(url)
            await reload(client, changed)
            stale = await check.check_cached_prefix(url, bound, after_reset=True)
            await reset(client)
            fresh = await check.check_cached_prefix(url, bound, after_reset=True)
        finally:
            await reload(client, served)
            await reset(client)
    assert stale.survived_reset and not stale.passed, stale
    assert stale.cold_cached_tokens is not None and stale.cold_cached_tokens >= 480
    assert fresh.passed and fresh.cold_cached_tokens == 0, fresh
    assert fresh.warm_cached_tokens is not None and fresh.warm_cached_tokens >= 480


async def test_a_replica_without_a_kv_connector_has_no_tier_to_clear(
    pool: ReplicaSupervisor,
) -> None:
    """The swap's connector clear (serving.reload_worker) runs in a real replica's workers: a
    CPU replica has no KV connector, so it answers -1 and the swap goes on to vLLM's reset
    (with LMCache it clears the engine: GPU only)."""
    async with httpx.AsyncClient(timeout=60) as client:
        rpc = {"method": CLEAR_METHOD}
        response = await client.post(f"{pool.urls[0]}/collective_rpc", json=rpc)
    assert response.status_code == 200, response.text
    assert [int(r) for r in response.json()["results"]] == [-1]


async def test_swap_under_streaming_load_tags_every_response_with_one_version(
    gateway: GatewayThread, base_dir: Path, trained_dir: Path
) -> None:
    old, new = read_version(base_dir).version_id, read_version(trained_dir).version_id
    report, outcomes, swap_started, swap_ended = await publish_under_load(
        gateway, trained_dir, base_dir
    )
    assert report.ok, report
    assert [r.outcome for r in report.replicas] == ["swapped", "swapped"]
    # The prefix-cache check ran after each reset: nothing survived it, and the warm answer
    # read the cache.
    for step in report.replicas:
        cached = step.cache_check
        assert cached is not None and cached.passed and cached.cold_cached_tokens == 0, step
        assert cached.warm_cached_tokens
    assert report.call_timeout_s > swap_config(gateway).request_timeout_s
    failures = [o for o in outcomes if o.status != 200 or not o.completed]
    assert not failures, failures[:3]
    assert len(outcomes) >= 8
    assert all(len(o.versions) == 1 and o.versions[0] in {old, new} for o in outcomes)
    before = [o for o in outcomes if o.ended < swap_started]
    after = [o for o in outcomes if o.started > swap_ended]
    assert before and after
    assert {o.versions[0] for o in before} == {old}
    assert {o.versions[0] for o in after} == {new}
    assert served_versions(gateway) == {new}
    # The records carry the same version as the responses' headers.
    assert {r.weights_version for r in gateway.sink.records} <= {old, new}


async def test_failed_probe_rolls_back_to_the_previous_weights(
    gateway: GatewayThread, trained_dir: Path, tmp_path: Path
) -> None:
    corrupt = corrupted_copy(trained_dir, tmp_path)
    trained = read_version(trained_dir).version_id
    report, outcomes, _, _ = await publish_under_load(gateway, corrupt, trained_dir)
    assert report.rolled_back and not report.ok
    first = report.replicas[0]
    assert first.outcome == "failed" and first.probe is not None and not first.probe.passed
    assert len(report.replicas) == 1  # stopped at the first
    assert not [o for o in outcomes if o.status != 200 or not o.completed]
    assert {o.versions[0] for o in outcomes} == {trained}
    assert served_versions(gateway) == {trained}
    # Both replicas compute the trained weights again.
    probe = checkpoint_probe(trained_dir)
    async with httpx.AsyncClient(timeout=60) as client:
        for url in gateway_urls(gateway):
            response = await client.post(
                f"{url}/v1/completions",
                json={
                    "model": LOCAL_MODEL_NAME,
                    "prompt": list(probe.prompt_token_ids),
                    "max_tokens": 1,
                    "prompt_logprobs": 0,
                },
            )
            entries = response.json()["choices"][0]["prompt_logprobs"][1:]
            served = [
                e[str(t)]["logprob"]
                for e, t in zip(entries, probe.prompt_token_ids[1:], strict=True)
            ]
            bound = probe_tolerance(swap_config(gateway).tolerance, trained_dir)
            assert compare_probe(probe, served, bound).passed


async def test_preflight_refuses_a_replica_without_the_reload_extension(
    gateway: GatewayThread, trained_dir: Path, base_dir: Path
) -> None:
    with pytest.raises(HotSwapError, match="worker_extension_cls"):
        await publish_weights(base_dir, trained_dir, [gateway.base_url], swap_config(gateway))


async def test_gateway_stops_routing_to_a_killed_replica(
    gateway: GatewayThread, pool: ReplicaSupervisor
) -> None:
    victim = pool.replica(1)
    assert victim is not None and victim.pid is not None
    os.killpg(victim.pid, signal.SIGKILL)
    await asyncio.sleep(1.5)
    states = gateway.state.targets.pools()["local"].replicas
    assert not states[pool.urls[1]].healthy and states[pool.urls[0]].healthy
    async with httpx.AsyncClient(base_url=gateway.base_url, timeout=60) as client:
        outcomes = [await stream_once(client, n) for n in range(4)]
    assert all(o.status == 200 and o.completed for o in outcomes)
    # The supervisor noticed and is restarting it (not awaited: a boot takes a minute).
    for _ in range(20):
        if pool.status()[1].restarts == 1:
            break
        await asyncio.sleep(0.25)
    status = pool.status()[1]
    assert status.restarts == 1 and status.last_exit_code == -signal.SIGKILL


def corrupted_copy(checkpoint: Path, tmp_path: Path) -> Path:
    """A checkpoint whose weights were damaged after training (experts' outputs negated) but
    whose version file still carries the trainer's probe: what a broken export would publish."""
    version = read_version(checkpoint)
    tensors = load_file(str(checkpoint / "model.safetensors"))
    damaged = {k: (-v if ".down_proj." in k else v) for k, v in tensors.items()}
    with staging_dir(tmp_path) as staging:
        save_file(damaged, str(staging / "model.safetensors"), metadata={"format": "pt"})
        for name in ("config.json", "generation_config.json"):
            (staging / name).write_bytes((checkpoint / name).read_bytes())
        copy_tokenizer_files(checkpoint, staging)
        return finalize_checkpoint(
            staging,
            tmp_path,
            kind="pretrain",
            parent=version.version_id,
            spec=version.spec,
            seed=version.seed,
            probe=version.probe,
        )
