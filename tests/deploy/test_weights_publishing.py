"""The scripts that keep a GPU fleet's models volume and its replicas' versions true, run for real:
the publisher Job's (deploy/k8s/overlays/gpu/publish/publish_weights.py) stages a checkpoint
under its version, runs the swap and repoints `current` only when the swap succeeded; the
replicas' postStart hook (deploy/k8s/overlays/gpu/state_weights_version.py) tells a (re)started
vLLM, on loopback here, the version of the checkpoint it loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tests.deploy.deploy_files import DEPLOY
from tests.fixtures.loopback_server import LoopbackServer

GPU = DEPLOY / "k8s" / "overlays" / "gpu"
PUBLISH_SCRIPT = GPU / "publish" / "publish_weights.py"
HOOK_SCRIPT = GPU / "state_weights_version.py"
VERSION_FILE = "switchyard_version.json"
# The swap command stand-in: records its arguments and where `current` pointed meanwhile.
SWAP_STUB = """
import json, os, sys
root = os.environ["MODELS_ROOT"]
link = os.path.join(root, "current")
record = {"argv": sys.argv[1:], "current": os.readlink(link) if os.path.islink(link) else None}
with open(os.environ["SWAP_RECORD"], "w") as f:
    json.dump(record, f)
sys.exit(int(os.environ["SWAP_EXIT"]))
"""


def checkpoint(path: Path, version: str | None, weights: bytes = b"w") -> Path:
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(weights)
    if version is not None:
        (path / VERSION_FILE).write_text(json.dumps({"version_id": version}))
    return path


class Volume:
    """A models root with the served version `ft-old` (unless `empty`), a checkpoint `ft-new` to
    publish, and the swap stub."""

    def __init__(self, tmp: Path, *, empty: bool = False) -> None:
        self.root = tmp / "models"
        self.root.mkdir()
        if not empty:
            checkpoint(self.root / "ft-old", "ft-old", b"old")
            (self.root / "current").symlink_to("ft-old")
        self.checkpoint = checkpoint(tmp / "export" / "run-7", "ft-new", b"new")
        self.stub = tmp / "swap_stub.py"
        self.stub.write_text(SWAP_STUB)
        self.record = tmp / "swap.json"

    def publish(self, swap_exit: int = 0) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "MODELS_ROOT": str(self.root),
            "SWAP_RECORD": str(self.record),
            "SWAP_EXIT": str(swap_exit),
        }
        command = [sys.executable, str(PUBLISH_SCRIPT), "--models-root", str(self.root)]
        command += ["--checkpoint", str(self.checkpoint), "--", sys.executable, str(self.stub)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)

    def swap(self) -> dict[str, Any] | None:
        """What the swap command got, None if it did not run."""
        return json.loads(self.record.read_text()) if self.record.exists() else None

    def current(self) -> str:
        return os.readlink(self.root / "current")

    def names(self) -> set[str]:
        return {p.name for p in self.root.iterdir()}


def test_a_checkpoint_is_staged_under_its_version_swapped_from_the_served_one_then_current(
    tmp_path: Path,
) -> None:
    volume = Volume(tmp_path)
    done = volume.publish()
    assert done.returncode == 0, done.stderr
    staged = volume.root / "ft-new"
    assert (staged / "model.safetensors").read_bytes() == b"new"
    assert volume.swap() == {
        "argv": ["--checkpoint", str(staged), "--previous", str(volume.root / "ft-old")],
        "current": "ft-old",  # repointed only after the swap
    }
    assert volume.current() == "ft-new"  # relative: it resolves wherever the volume is mounted
    assert (volume.root / "current").resolve() == staged.resolve()
    assert volume.names() == {"ft-old", "ft-new", "current"}  # no staging copy, no spare link


@pytest.mark.parametrize("swap_exit", [1, 3], ids=["rolled-back", "failed"])
def test_a_swap_that_rolled_back_or_failed_leaves_current_on_the_served_version(
    tmp_path: Path, swap_exit: int
) -> None:
    volume = Volume(tmp_path)
    done = volume.publish(swap_exit)
    assert done.returncode == swap_exit
    assert volume.current() == "ft-old" and "stays on ft-old" in done.stderr
    # Staged: publishing it again retries the swap without copying it again.
    assert volume.names() == {"ft-old", "ft-new", "current"}
    again = volume.publish()
    assert again.returncode == 0 and "already staged" in again.stdout
    assert volume.current() == "ft-new"


def test_the_first_publish_makes_the_checkpoint_current_without_a_swap(tmp_path: Path) -> None:
    volume = Volume(tmp_path, empty=True)
    done = volume.publish()
    assert done.returncode == 0, done.stderr
    assert volume.swap() is None  # no replica could start without /models/current
    assert volume.current() == "ft-new"


def test_a_version_already_current_is_not_swapped_again(tmp_path: Path) -> None:
    volume = Volume(tmp_path)
    assert volume.publish().returncode == 0
    volume.record.unlink()
    done = volume.publish()
    assert done.returncode == 0 and volume.swap() is None
    assert volume.current() == "ft-new"


def test_a_copy_a_dead_publish_left_never_takes_the_version_name(tmp_path: Path) -> None:
    volume = Volume(tmp_path)
    partial = checkpoint(volume.root / ".staging-ft-new-99999", None, b"ne")
    assert volume.publish().returncode == 0
    assert not partial.exists()
    assert (volume.root / "ft-new" / "model.safetensors").read_bytes() == b"new"


@pytest.mark.parametrize(
    ("breakage", "message"),
    [("no-version", "no readable switchyard_version.json"), ("current-dir", "not a symlink")],
)
def test_a_checkpoint_without_a_version_or_a_current_that_is_no_link_is_refused(
    tmp_path: Path, breakage: str, message: str
) -> None:
    volume = Volume(tmp_path, empty=True)
    if breakage == "no-version":
        (volume.checkpoint / VERSION_FILE).unlink()
    else:
        checkpoint(volume.root / "current", "ft-old")
    done = volume.publish()
    assert done.returncode == 2 and message in done.stderr
    assert volume.swap() is None and "ft-new" not in volume.names()


class Replica:
    """vLLM's start on loopback: `/health` answers 503 until `up`; `/update_weight_version`
    keeps what it was sent."""

    def __init__(self) -> None:
        self.up = False
        self.health_calls = 0
        self.stated: list[Any] = []
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/update_weight_version", self._update)
        self.server = LoopbackServer(app, "replica")

    async def _health(self, request: web.Request) -> web.Response:
        self.health_calls += 1
        return web.Response(status=200 if self.up else 503, text="")

    async def _update(self, request: web.Request) -> web.Response:
        self.stated.append(await request.json())
        return web.json_response({"success": True})


@pytest.fixture
def replica() -> Iterator[Replica]:
    started = Replica()
    started.server.start()
    try:
        yield started
    finally:
        started.server.stop()


def hook(model: Path, replica: Replica, within_s: float) -> subprocess.Popen[str]:
    command = [sys.executable, str(HOOK_SCRIPT), str(model), replica.server.url]
    command += ["--within-s", str(within_s), "--poll-s", "0.05"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition: Any, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.01)


def test_a_started_replica_is_told_the_version_current_pointed_at_when_it_started(
    tmp_path: Path, replica: Replica
) -> None:
    root = tmp_path / "models"
    checkpoint(root / "ft-1", "ft-1")
    checkpoint(root / "ft-2", "ft-2")
    (root / "current").symlink_to("ft-1")
    started = hook(root / "current", replica, within_s=30)
    wait_for(lambda: replica.health_calls >= 2)  # still loading
    (root / "current").unlink()
    (root / "current").symlink_to("ft-2")  # a publish repoints while it loads ft-1
    replica.up = True
    _, err = started.communicate(timeout=30)
    assert started.returncode == 0, err
    assert replica.stated == [{"new_version": "ft-1"}]


def test_a_replica_whose_checkpoint_names_no_version_is_told_none(
    tmp_path: Path, replica: Replica
) -> None:
    model = checkpoint(tmp_path / "models" / "base", None)
    started = hook(model, replica, within_s=30)
    _, err = started.communicate(timeout=30)
    assert started.returncode == 0 and "none stated" in err
    assert replica.health_calls == 0 and replica.stated == []


def test_a_replica_that_never_answers_health_fails_its_hook(
    tmp_path: Path, replica: Replica
) -> None:
    model = checkpoint(tmp_path / "models" / "ft-1", "ft-1")
    started = hook(model, replica, within_s=0.5)
    _, err = started.communicate(timeout=30)
    assert started.returncode == 1 and "did not answer 200" in err
    assert replica.stated == []
