"""The benchmarks that start servers stop every one of them on SIGTERM and SIGINT, even when a
second signal arrives while they stop: `make bench-gateway` (simulator, gateway, the load
generator of the running cell) and `make bench-kv` (two replicas with their engine cores, the
gateway; vLLM's command swapped for `tests.serving.fake_vllm`, so no vLLM boots)."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.serving.fake_vllm import ENGINE_CORE_MARK
from tests.serving.process_tree import Proc, ProcessWatch


def test_bench_gateway_stopped_mid_cell_leaves_no_server_or_load_generator(tmp_path: Path) -> None:
    args = ["-m", "loadtests.bench.gateway", "--systems", "direct,switchyard", "--modes", "unary"]
    args += ["--concurrency", "1", "--duration", "300", "--store-records", "0"]
    args += ["--out-dir", str(tmp_path / "out")]

    def measuring(tree: list[Proc]) -> bool:
        names = " ".join(p.cmdline for p in tree)
        return all(
            m in names for m in ("frontier_sim", "-m gateway", "loadtests.bench.gateway.loadgen")
        )

    with ProcessWatch(tmp_path) as watch:
        watch.start_python(args)
        watch.wait_for_tree("a cell under way", measuring, timeout_s=180)
        status = watch.stop_with(signal.SIGINT, signal.SIGTERM, between_s=0.1, timeout_s=60)
        assert status == 128 + signal.SIGINT
        assert "interrupted (SIGINT); servers stopped" in watch.output()


def test_bench_kv_stopped_while_replicas_start_leaves_no_replica_or_gateway(
    tmp_path: Path,
) -> None:
    args = ["-m", "tests.serving.signal_drivers", "bench_kv", "--quick", "--skip-sim"]
    args += ["--out", str(tmp_path / "out")]

    def started(tree: list[Proc]) -> bool:
        cores = sum(ENGINE_CORE_MARK in p.cmdline for p in tree)
        return cores == 2 and any("-m gateway" in p.cmdline for p in tree)

    with ProcessWatch(tmp_path) as watch:
        watch.start_python(args)
        watch.wait_for_tree("2 replicas and the gateway", started, timeout_s=180)
        status = watch.stop_with(signal.SIGTERM, signal.SIGINT, timeout_s=60)
        assert status == 128 + signal.SIGTERM
