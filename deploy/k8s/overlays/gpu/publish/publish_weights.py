"""Publish a checkpoint to replicas that load from a shared models root, then make it the one a
(re)started replica loads. The publisher Job (publish-job.yaml) runs

    python publish_weights.py --models-root ROOT --checkpoint DIR -- SWAP_COMMAND...

1. Stage. DIR, a `serving.build` checkpoint (its `switchyard_version.json` names its
   `version_id`), is copied to ROOT/.staging-<version>-<pid>, then renamed to ROOT/<version>: no
   replica sees a version's name on a partial copy. A version already under ROOT is reused.
2. Swap. SWAP_COMMAND runs with `--checkpoint ROOT/<version> --previous ROOT/<served>` appended,
   <served> being what ROOT/current points at. The Job's is `python -m serving.hotswap ...`:
   drain, reload, probe, undrain, one replica at a time; every replica rolled back when one
   fails (exit 1). Skipped when ROOT/current already points at <version>, and when there is no
   ROOT/current yet (the first publish: no replica can have started without it).
3. Repoint, only when the swap exited 0 (every replica serves <version>): a new relative symlink
   ROOT/.current-<pid> -> <version> is renamed over ROOT/current. rename(2) replaces it
   atomically: a replica starting meanwhile resolves the old link or the new one, never none.
   A swap that failed or rolled back leaves ROOT/current on what the fleet still serves, so a
   pod restarted later loads that.

Exit status: the swap's (0: published, ROOT/current repointed); 2 when DIR or ROOT is not as
described. Older versions stay under ROOT (a later swap's `--previous`); remove them by hand.
Standard library only: it runs in the gateway's image, which has `serving`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

VERSION_FILE = "switchyard_version.json"  # serving.model_config.VERSION_FILE
CURRENT = "current"  # the replicas' --model is ROOT/current
_VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class PublishError(Exception):
    """The checkpoint or the models root is not as the module docstring describes."""


def version_of(checkpoint: Path) -> str:
    """The checkpoint's `version_id`, checked to be a directory name under ROOT."""
    try:
        version = json.loads((checkpoint / VERSION_FILE).read_text()).get("version_id")
    except (OSError, ValueError, AttributeError) as exc:
        raise PublishError(f"{checkpoint}: no readable {VERSION_FILE} ({exc})") from exc
    if not isinstance(version, str) or not _VERSION_NAME.fullmatch(version) or version == CURRENT:
        raise PublishError(f"{checkpoint}: version_id {version!r} cannot name a directory")
    return version


def stage(checkpoint: Path, root: Path, version: str) -> Path:
    """ROOT/<version>, copied from `checkpoint` unless already there (step 1)."""
    target = root / version
    if target.exists():
        if version_of(target) != version:
            raise PublishError(f"{target} holds another version; move it away")
        print(f"{target}: already staged")
        return target
    for stale in root.glob(f".staging-{version}-*"):  # a publish that died copying
        shutil.rmtree(stale)
    staging = root / f".staging-{version}-{os.getpid()}"
    shutil.copytree(checkpoint, staging, symlinks=False)
    staging.rename(target)
    print(f"{checkpoint} -> {target}")
    return target


def served(root: Path) -> str | None:
    """The version ROOT/current points at; None before the first publish."""
    current = root / CURRENT
    if not current.is_symlink():
        if current.exists():
            raise PublishError(f"{current} is not a symlink: move it to {root}/<its version_id>")
        return None
    return os.readlink(current)


def repoint(root: Path, version: str) -> None:
    """ROOT/current -> <version>, replaced in one rename (step 3)."""
    link = root / f".{CURRENT}-{os.getpid()}"
    link.unlink(missing_ok=True)
    link.symlink_to(version)  # relative: it resolves wherever the volume is mounted
    os.replace(link, root / CURRENT)
    print(f"{root / CURRENT} -> {version}")


def publish(checkpoint: Path, root: Path, swap: Sequence[str]) -> int:
    version = version_of(checkpoint)
    previous = served(root)  # before the copy: a root it cannot repoint fails at once
    staged = stage(checkpoint, root, version)
    if previous == version:
        print(f"{root / CURRENT} already points at {version}: nothing to swap")
        return 0
    if previous is not None:
        command = [*swap, "--checkpoint", str(staged), "--previous", str(root / previous)]
        code = subprocess.run(command, check=False).returncode
        if code != 0:
            print(f"swap exited {code}: {root / CURRENT} stays on {previous}", file=sys.stderr)
            return code if code > 0 else 1
    repoint(root, version)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models-root", type=Path, required=True, help="The shared volume.")
    parser.add_argument("--checkpoint", type=Path, required=True, help="Directory to publish.")
    parser.add_argument("swap", nargs=argparse.REMAINDER, help="-- and the swap command.")
    args = parser.parse_args(argv)
    swap = args.swap[1:] if args.swap[:1] == ["--"] else args.swap
    if not swap:
        parser.error("give the swap command after --")
    try:
        return publish(args.checkpoint, args.models_root, swap)
    except PublishError as exc:
        print(f"publish_weights: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
