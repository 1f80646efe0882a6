"""Weight hot-swap: publish a new checkpoint to running vLLM replicas one at a time, under
traffic, with a logprob probe, a prefix-cache check and automatic rollback.

The protocol, per replica, in the order given (`publish_weights`):

1. Drain. `POST {gateway}/admin/replicas/drain {"target", "replica", "timeout_s"}` (admin token
   as Bearer; to the first reachable gateway given: any one reaches the fleet) answers once the
   fleet routes nothing new to the replica and its requests in flight are done. Not drained in
   time: the replica is put back and the publish stops (nothing was changed on it).
2. Reload. The cache check's prompt is cached first (old weights; step 5). Then `POST
   {replica}/collective_rpc {"method": "switchyard_reload", "args": [dir]}` runs vLLM's in-place
   `reload_weights(weights_path=dir)` in its workers and, on CPU, the MoE prepack vLLM skips on
   reload (:mod:`serving.reload_worker`; docs/deploy.md, "Weight hot-swap"). Replicas run
   with `dev_mode=True`, `worker_extension_cls=RELOAD_WORKER_EXTENSION` and see `dir`.
3. Version. `POST /update_weight_version {"new_version": id}`; `GET /weight_info` must echo it.
4. Prefix cache. `POST {replica}/collective_rpc {"method": "switchyard_clear_kv_connector"}`
   clears the KV connector's tier (LMCache's engine: :mod:`serving.reload_worker`), then `POST
   /reset_prefix_cache?reset_external=true` until it succeeds (vLLM's own blocks).
5. Cache check (:mod:`serving.prefix_cache_check`): the long check prompt's greedy answers read
   from the cache must equal one computed from scratch, within the probe's bound: stale blocks.
6. Probe. `POST /v1/completions` of the checkpoint's probe prompt (token ids), `max_tokens=1`,
   `prompt_logprobs=0`: every prompt token's served logprob against the trainer's
   (`CheckpointVersion.probe`), within the checkpoint format's bound
   (:func:`serving.swap_checks.probe_tolerance`). It checks the weights, not the cache.
7. Undrain. `POST {gateway}/admin/replicas/undrain {"target", "replica", "weights_version"}`.

Rollback. When step 2 to 6 fails on a replica, it and every replica already swapped go back to
`previous_dir` (steps 2-6 with the previous probe, then undrain with the previous version), one
at a time: the fleet never serves two versions for longer than one swap. The report says
`rolled_back=True`; `HotSwapError` only if the rollback itself fails (that replica is left
drained: it serves nothing rather than unknown weights).

Preflight, before anything is drained: the checkpoints' checks (:mod:`serving.swap_checks`);
every replica answers the reload extension, passes the cache check and serves one probe (warming
vLLM's logprobs paths, slow on first use). Every call's timeout is `request_timeout_s` plus
`timeout_s_per_gb` per GB of the larger checkpoint's weights (the reload reads all of them).

CLI: `python -m serving.hotswap --checkpoint NEW --previous OLD --gateway URL [--gateway URL ...]
--replica URL ...` (admin token from `$SWITCHYARD_ADMIN_TOKEN`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field

from serving.build import read_version
from serving.logprob_probe import checkpoint_probe
from serving.model_config import CheckpointVersion, ProbeReference
from serving.names import ADMIN_TOKEN_ENV, LOCAL_MODEL_NAME
from serving.prefix_cache_check import (
    CacheCheckFailed,
    CacheCheckResult,
    CacheCheckSettings,
    PrefixCacheCheck,
)
from serving.reload_worker import CLEAR_METHOD, RELOAD_METHOD, RELOAD_WORKER_EXTENSION
from serving.swap_checks import (
    HotSwapError,
    ProbeResult,
    ProbeTolerance,
    add_probe_arguments,
    add_timeout_arguments,
    call_timeout_s,
    check_compatible,
    compare_probe,
    probe_tolerance,
    timeout_overrides,
    tolerance_from,
)

logger = logging.getLogger(__name__)


class HotSwapConfig(BaseModel):
    """Where the gateway fleet is and how patient and strict a publish is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gateway_url: str = Field(description="Gateway base URL (admin API).")
    more_gateways: tuple[str, ...] = Field(
        default=(),
        description="Other gateways of the same fleet, tried in order when the one before "
        "cannot be reached (a drain or undrain through any one reaches the whole fleet).",
    )
    admin_token: str = Field(min_length=1, repr=False, description="Gateway admin credential.")
    actor: str = Field(
        default="hotswap",
        pattern=r"^[a-z][a-z0-9-]{0,31}$",
        description="Who the gateways' change log names for the drains and undrains.",
    )
    target: str = Field(default="local", description="Gateway backend holding the replicas.")
    served_model_name: str = LOCAL_MODEL_NAME
    drain_timeout_s: float = Field(default=60.0, gt=0)
    request_timeout_s: float = Field(
        default=120.0,
        gt=0,
        description="Every replica/admin call's timeout, before timeout_s_per_gb is added (above "
        "drain_timeout_s: a drain call waits that long).",
    )
    timeout_s_per_gb: float = Field(
        # 100 MB/s, a network volume's cold read (the GPU overlay's PVC): the reload reads every
        # weight once; local NVMe reads ~20x faster, so this only bounds a hung call.
        default=10.0,
        ge=0,
        description="Seconds added to every call's timeout per GB of the larger checkpoint's "
        "safetensors (a 61 GB bf16 Qwen3-30B-A3B: 120 + 610 s).",
    )
    reset_attempts: int = Field(default=50, ge=1, description="Tries of reset_prefix_cache.")
    verify_digest: bool = Field(default=True, description="Re-hash the new weights first.")
    tolerance: ProbeTolerance | None = Field(
        default=None,
        description="The probe's bound (the cache check's too); None: by the checkpoint's "
        "format (bf16 or fp8).",
    )
    cache_check: CacheCheckSettings | None = Field(
        default=CacheCheckSettings(),
        description="The prefix-cache check after each reload (step 5); None skips it.",
    )


@dataclass
class ReplicaSwap:
    """What happened on one replica.

    `outcome`: `swapped` (serves the new version), `failed` (its swap failed and it was put
    back on the previous version), `rolled_back` (it had been swapped, then went back because a
    later replica failed). `seconds` runs from the drain request to the undrain answer (the
    time the replica was out of rotation), of which `drain_seconds` waiting for in-flight
    requests and `install_seconds` reloading, verifying and checking (`probe`, `cache_check`:
    the last results, passed or not).
    """

    replica: str
    outcome: Literal["swapped", "rolled_back", "failed"] = "failed"
    seconds: float = 0.0
    drain_seconds: float = 0.0
    install_seconds: float = 0.0
    probe: ProbeResult | None = None
    cache_check: CacheCheckResult | None = None
    error: str | None = None


@dataclass
class SwapReport:
    """The result of one `publish_weights` call."""

    version: str
    previous_version: str
    replicas: list[ReplicaSwap] = field(default_factory=list)
    rolled_back: bool = False
    seconds: float = 0.0
    call_timeout_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Every replica now serves `version`."""
        return not self.rolled_back and all(r.outcome == "swapped" for r in self.replicas)


class _ProbeFailed(HotSwapError):
    def __init__(self, result: ProbeResult) -> None:
        super().__init__(
            f"probe mismatch: mean |diff| {result.mean_abs_diff:.4f}, max {result.max_abs_diff:.4f}"
        )


class _Publisher:
    def __init__(self, config: HotSwapConfig, client: httpx.AsyncClient) -> None:
        self.config = config
        self.client = client

    async def _admin(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """The admin call on the first gateway of the fleet that can take it (one unreachable,
        or shutting down, passes it to the next)."""
        gateways = (self.config.gateway_url, *self.config.more_gateways)
        for i, gateway in enumerate(gateways):
            last = i == len(gateways) - 1
            try:
                response = await self.client.post(
                    f"{gateway.rstrip('/')}/admin/replicas/{path}",
                    json={"target": self.config.target, **body},
                    headers={
                        "authorization": f"Bearer {self.config.admin_token}",
                        "x-switchyard-actor": self.config.actor,  # named in the change log
                    },
                )
            except httpx.TransportError:
                if last:
                    raise
                logger.warning("gateway %s unreachable; %s through the next one", gateway, path)
                continue
            if response.status_code == 503 and not last:
                continue
            break
        if response.status_code != 200:
            raise HotSwapError(f"gateway {path} failed ({response.status_code}): {response.text}")
        result: dict[str, Any] = response.json()
        return result

    async def drain(self, replica: str) -> None:
        result = await self._admin(
            "drain", {"replica": replica, "timeout_s": self.config.drain_timeout_s}
        )
        if not result.get("drained"):
            await self._admin("undrain", {"replica": replica})
            raise HotSwapError(
                f"{replica} still had {result.get('in_flight')} requests in flight after "
                f"{self.config.drain_timeout_s}s; put back unchanged"
            )

    async def undrain(self, replica: str, version: str) -> None:
        await self._admin("undrain", {"replica": replica, "weights_version": version})

    async def _post(self, url: str, body: dict[str, Any] | None = None) -> httpx.Response:
        response = await self.client.post(url, json=body)
        if response.status_code != 200:
            raise HotSwapError(f"POST {url} failed ({response.status_code}): {response.text}")
        return response

    def cache_check(self, probe: ProbeReference) -> PrefixCacheCheck | None:
        settings = self.config.cache_check
        if settings is None:
            return None
        model = self.config.served_model_name
        return PrefixCacheCheck(self.client, model, probe.prompt_token_ids, settings)

    async def preflight(self, replica: str, served: _Side, probe: ProbeReference) -> None:
        """The replica has the reload extension and passes the cache check on the weights it
        serves (`served`); its logprobs paths are warmed up (the first such request costs vLLM
        seconds, which would otherwise be spent drained)."""
        response = await self.client.post(
            f"{replica}/collective_rpc", json={"method": f"{RELOAD_METHOD}_ready"}
        )
        if response.status_code != 200 or RELOAD_METHOD not in response.text:
            raise HotSwapError(
                f"{replica} cannot reload weights: start it with dev_mode=True and "
                f"worker_extension_cls={RELOAD_WORKER_EXTENSION!r}"
            )
        check = self.cache_check(served.probe)
        if check is not None:
            await check.seed_cache(replica)
            bound = probe_tolerance(self.config.tolerance, Path(served.path))
            result = await check.check_cached_prefix(replica, bound, after_reset=False)
            if not result.passed:
                raise HotSwapError(
                    f"{replica} fails the prefix-cache check before any swap: "
                    f"{CacheCheckFailed(result)}"
                )
        await self.served_logprobs(replica, probe)

    async def install(self, replica: str, side: _Side, record: ReplicaSwap) -> None:
        """Steps 2-6 on a drained replica, their results into `record`; raises HotSwapError
        (_ProbeFailed, CacheCheckFailed when a check fails)."""
        check = self.cache_check(side.probe)
        if check is not None:
            await check.seed_cache(replica)  # blocks of the weights served until now
        version = side.version.version_id
        await self._post(
            f"{replica}/collective_rpc", {"method": RELOAD_METHOD, "args": [side.path]}
        )
        await self._post(f"{replica}/update_weight_version", {"new_version": version})
        info = (await self.client.get(f"{replica}/weight_info")).json()
        if info.get("weight_version") != version:
            raise HotSwapError(f"{replica} reports weights {info}, not {version}")
        # the connector's tier (LMCache) first: vLLM's reset_external does not reach it
        await self._post(f"{replica}/collective_rpc", {"method": CLEAR_METHOD})
        for _ in range(self.config.reset_attempts):
            # reset_external: the connector's tier too, where a connector implements it.
            reset = f"{replica}/reset_prefix_cache?reset_external=true"
            if (await self._post(reset)).json().get("success"):
                break
            await asyncio.sleep(0.1)
        else:
            raise HotSwapError(f"{replica} kept refusing to reset its prefix cache")
        bound = probe_tolerance(self.config.tolerance, Path(side.path))
        if check is not None:  # before the probe, whose blocks begin the check prompt
            record.cache_check = await check.check_cached_prefix(replica, bound, after_reset=True)
            if not record.cache_check.passed:
                raise CacheCheckFailed(record.cache_check)
        served = await self.served_logprobs(replica, side.probe)
        record.probe = compare_probe(side.probe, served, bound)
        if not record.probe.passed:
            raise _ProbeFailed(record.probe)

    async def served_logprobs(self, replica: str, probe: ProbeReference) -> list[float]:
        """The replica's prompt logprobs of the probe's tokens 1..n."""
        response = await self._post(
            f"{replica}/v1/completions",
            {
                "model": self.config.served_model_name,
                "prompt": list(probe.prompt_token_ids),
                "max_tokens": 1,
                "temperature": 0,
                "prompt_logprobs": 0,
            },
        )
        entries = response.json()["choices"][0]["prompt_logprobs"][1:]
        ids = probe.prompt_token_ids[1:]
        return [float(entry[str(t)]["logprob"]) for entry, t in zip(entries, ids, strict=True)]


@dataclass(frozen=True)
class _Side:
    """One checkpoint of a swap: where it is (absolute), what it is, what it must compute."""

    path: str
    version: CheckpointVersion
    probe: ProbeReference


def _side(checkpoint_dir: Path, probe: ProbeReference | None = None) -> _Side:
    return _Side(
        str(checkpoint_dir.resolve()),
        read_version(checkpoint_dir),
        probe or checkpoint_probe(checkpoint_dir),
    )


async def publish_weights(
    checkpoint_dir: Path,
    previous_dir: Path,
    replicas: Sequence[str],
    config: HotSwapConfig,
    *,
    probe: ProbeReference | None = None,
) -> SwapReport:
    """Publish `checkpoint_dir` to `replicas` (base URLs as the gateway lists them), which serve
    `previous_dir` now, one at a time (see the module docstring).

    `probe` overrides the reference logprobs (default: the checkpoint's stored probe, or one
    computed from its weights). Returns the report; raises HotSwapError when the preflight
    fails (nothing changed) or a rollback fails.
    """
    started = time.perf_counter()
    # Hashing weights and computing probes is CPU work: keep the event loop serving.
    await asyncio.to_thread(
        check_compatible, checkpoint_dir, previous_dir, verify_digest=config.verify_digest
    )
    new = await asyncio.to_thread(_side, checkpoint_dir, probe)
    old = await asyncio.to_thread(_side, previous_dir)
    urls = [r.rstrip("/") for r in replicas]
    report = SwapReport(new.version.version_id, old.version.version_id)
    report.call_timeout_s = call_timeout_s(
        config.request_timeout_s, config.timeout_s_per_gb, (checkpoint_dir, previous_dir)
    )
    logger.info("every replica/admin call times out after %.0fs", report.call_timeout_s)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(report.call_timeout_s, connect=5.0)
    ) as client:
        publisher = _Publisher(config, client)
        for url in urls:
            await publisher.preflight(url, old, new.probe)
        swapped: list[str] = []
        for url in urls:
            step = ReplicaSwap(url)
            report.replicas.append(step)
            t0 = time.perf_counter()
            await publisher.drain(url)
            step.drain_seconds = time.perf_counter() - t0
            try:
                await publisher.install(url, new, step)
                step.install_seconds = time.perf_counter() - t0 - step.drain_seconds
            except (HotSwapError, httpx.HTTPError) as exc:
                step.error = str(exc)
                logger.error("swap to %s failed on %s: %s; rolling back", report.version, url, exc)
                await _roll_back(publisher, [url, *reversed(swapped)], old, report, drained=url)
                report.seconds = time.perf_counter() - started
                return report
            await publisher.undrain(url, report.version)
            step.outcome, step.seconds = "swapped", time.perf_counter() - t0
            swapped.append(url)
            logger.info("%s serves %s (%.2fs)", url, report.version, step.seconds)
    report.seconds = time.perf_counter() - started
    return report


async def _roll_back(
    publisher: _Publisher, urls: Sequence[str], old: _Side, report: SwapReport, *, drained: str
) -> None:
    report.rolled_back = True
    steps = {step.replica: step for step in report.replicas}
    for url in urls:
        if url != drained:
            await publisher.drain(url)
        try:
            await publisher.install(url, old, ReplicaSwap(url))  # the swap's results stay
        except (HotSwapError, httpx.HTTPError) as exc:
            raise HotSwapError(
                f"rollback of {url} to {report.previous_version} failed ({exc}); it stays drained"
            ) from exc
        await publisher.undrain(url, report.previous_version)
        if url != drained:
            steps[url].outcome = "rolled_back"
        logger.warning("%s rolled back to %s", url, report.previous_version)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI: publish a checkpoint through the gateway; exit 1 when it was rolled back."""
    parser = argparse.ArgumentParser(
        prog="python -m serving.hotswap", description="Hot-swap replicas' weights."
    )
    parser.add_argument("--checkpoint", type=Path, required=True, help="New checkpoint dir.")
    parser.add_argument("--previous", type=Path, required=True, help="Checkpoint served now.")
    parser.add_argument(
        "--gateway",
        action="append",
        required=True,
        help="A gateway of the fleet (repeat: the next is used when one cannot be reached).",
    )
    parser.add_argument("--target", default=HotSwapConfig.model_fields["target"].default)
    parser.add_argument("--replica", action="append", required=True, help="Replica base URL.")
    add_probe_arguments(parser)
    add_timeout_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    token = os.environ.get(ADMIN_TOKEN_ENV)
    if not token:
        parser.error(f"set {ADMIN_TOKEN_ENV} to the gateway's admin token")
    config = HotSwapConfig(
        gateway_url=args.gateway[0],
        more_gateways=tuple(args.gateway[1:]),
        admin_token=token,
        target=args.target,
        tolerance=tolerance_from(args),
        **timeout_overrides(args),
    )
    report = asyncio.run(publish_weights(args.checkpoint, args.previous, args.replica, config))
    for step in report.replicas:
        probe = step.probe
        figures = (
            f"probe mean {probe.mean_abs_diff:.4f} max {probe.max_abs_diff:.4f}" if probe else ""
        )
        print(f"{step.replica}: {step.outcome} in {step.seconds:.2f}s {figures} {step.error or ''}")
    state = "rolled back to " + report.previous_version if report.rolled_back else "published"
    print(f"{report.version}: {state} in {report.seconds:.2f}s")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
