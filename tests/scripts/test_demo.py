"""`make demo` as a new user runs it: model built, vLLM + simulator + gateway up, both paths
answer with a freshly created API key (DEMO_SMOKE=1 exits after that check)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_demo_starts_everything_and_both_paths_answer(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DEMO_SMOKE": "1",
        "SWITCHYARD_PORT": str(_free_port()),
        "SWITCHYARD_VLLM_PORT": str(_free_port()),
        "SWITCHYARD_SIM_PORT": str(_free_port()),
        "SWITCHYARD_DEMO_DIR": str(tmp_path / "demo"),
    }
    env.pop("OPENAI_API_KEY", None)
    env.pop("ANTHROPIC_API_KEY", None)
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "demo.py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "local path    -> local" in out
    assert "frontier path -> frontier-openai" in out
    assert "API key (shown once): sy-" in out
    assert "curl http://127.0.0.1:" in out
