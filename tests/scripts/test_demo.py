"""`make demo` as a new user runs it: model built, vLLM + simulator + gateway up, both paths
answer with a freshly created API key; and however it is stopped (SIGTERM from `kill`, systemd
or `docker stop`, SIGINT from Ctrl-C), at any step, nothing it started is left running: not the
vLLM server with its engine core, nor the simulator, nor the gateway.

Each test starts vLLM on the CPU: the first up to serving (40-100 s on 2 cores), the second is
signalled while vLLM is still importing. Between them both signals stop it first (SIGINT, the
Ctrl-C the banner names, once it serves, then SIGTERM again; SIGTERM while it boots); that the
fleet treats the two alike at every step is ``tests/serving/test_processes.py``'s, so a second
boot to serve only for the other order would add a minute of CI and no behaviour."""

from __future__ import annotations

import signal
import socket
import sys
from pathlib import Path

import pytest

from serving.vllm_config import ENTRYPOINT_MODULE
from tests.serving.process_tree import REPO, Proc, ProcessWatch

ENGINE_CORE = "VLLM::EngineCore"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_demo(watch: ProcessWatch, tmp_path: Path) -> None:
    env = {
        "SWITCHYARD_PORT": str(_free_port()),
        "SWITCHYARD_VLLM_PORT": str(_free_port()),
        "SWITCHYARD_SIM_PORT": str(_free_port()),
        "SWITCHYARD_DEMO_DIR": str(tmp_path / "demo"),
        # The frontier targets are the simulator, whatever keys this machine has.
        "OPENAI_API_KEY": "",
        "ANTHROPIC_API_KEY": "",
    }
    watch.start([sys.executable, str(REPO / "scripts" / "demo.py")], env)


@pytest.mark.slow
def test_demo_serves_both_paths_then_a_stop_signal_stops_everything_even_if_sent_again(
    tmp_path: Path,
) -> None:
    first, second = signal.SIGINT, signal.SIGTERM
    with ProcessWatch(tmp_path) as watch:
        start_demo(watch, tmp_path)
        watch.wait_for("the banner", lambda: "Switchyard is up" in watch.output(), 900)
        out = watch.output()
        assert "local path    -> local" in out
        assert "frontier path -> frontier-openai" in out
        # cold start: `auto` goes to the frontier, never to the untrained local model
        assert "auto          -> frontier-openai (learned:frontier" in out
        assert "no scorer fitted yet" in out
        assert "API key (shown once): sy-" in out
        assert "curl http://127.0.0.1:" in out
        tree = watch.snapshot()
        assert ENGINE_CORE in " ".join(p.cmdline for p in tree)
        assert any("loadtests.frontier_sim" in p.cmdline for p in tree)
        assert any("-m gateway" in p.cmdline for p in tree)
        # The second signal arrives while it stops (an impatient operator): no effect.
        assert watch.stop_with(first, second, timeout_s=90) == 0
        assert "stopping ..." in watch.output()


@pytest.mark.slow
def test_sigterm_while_vllm_boots_stops_vllm_and_the_simulator(tmp_path: Path) -> None:
    def booting(tree: list[Proc]) -> bool:
        names = " ".join(p.cmdline for p in tree)
        return ENTRYPOINT_MODULE in names and "loadtests.frontier_sim" in names

    with ProcessWatch(tmp_path) as watch:
        start_demo(watch, tmp_path)
        watch.wait_for_tree("vLLM and the simulator", booting, 600)
        assert watch.stop_with(signal.SIGTERM, timeout_s=90) == 128 + signal.SIGTERM
