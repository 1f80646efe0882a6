"""postStart hook of a GPU replica: tell vLLM the version of the checkpoint it loaded.

vLLM answers `GET /weight_info` with "default" until a version is set (the hot swap sets it with
`POST /update_weight_version`). A pod that Kubernetes (re)starts loads whatever its `--model`
path points at (`/models/current`, repointed by the publisher Job after each swap), so this hook
resolves that path as the container starts, reads the checkpoint's `switchyard_version.json`
(`version_id`), waits until the server answers `/health`, and sets it. The gateway reads
`/weight_info` whenever a replica joins or returns (gateway/backends/replica_pool.py): it tags
the restarted replica's answers with what it loaded, not with what the last swap installed.

    python3 state_weights_version.py MODEL_PATH SERVER_URL --within-s S [--poll-s S]

Exit 0 once set, or at once when the checkpoint names no version (the gateway keeps the one
operators declared); 1 when the server did not answer `/health` within S seconds or refused the
version: the kubelet restarts the container, as a failed startup probe would. Standard library
only: it runs in vLLM's image.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

VERSION_FILE = "switchyard_version.json"  # serving.model_config.VERSION_FILE


def checkpoint_version(model_path: Path) -> str | None:
    """The `version_id` of the checkpoint `model_path` resolves to now; None without one."""
    try:
        data = json.loads((model_path.resolve() / VERSION_FILE).read_text())
    except (OSError, ValueError):
        return None
    version = data.get("version_id") if isinstance(data, dict) else None
    return version if isinstance(version, str) and version else None


def wait_healthy(server: str, within_s: float, poll_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(server + "/health", timeout=poll_s) as resp:
                if resp.status == 200:
                    return True
        except OSError:  # not listening yet, still loading (HTTPError, URLError are OSErrors)
            pass
        time.sleep(poll_s)
    return False


def set_version(server: str, version: str, timeout_s: float) -> None:
    request = urllib.request.Request(
        server + "/update_weight_version",
        data=json.dumps({"new_version": version}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=timeout_s):
        pass  # a status other than 2xx raises HTTPError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_path", type=Path, help="The replica's --model (a symlink).")
    parser.add_argument("server", help="The replica's own base URL, e.g. http://127.0.0.1:8000.")
    parser.add_argument(
        "--within-s", type=float, required=True, help="Start-up budget (the startup probe's)."
    )
    parser.add_argument("--poll-s", type=float, default=0.5, help="Between two /health calls.")
    args = parser.parse_args(argv)
    version = checkpoint_version(args.model_path)  # now: what the server is loading
    if version is None:
        print(f"{args.model_path}: no {VERSION_FILE} version_id; none stated", file=sys.stderr)
        return 0
    server = args.server.rstrip("/")
    if not wait_healthy(server, args.within_s, args.poll_s):
        print(f"{server}/health did not answer 200 within {args.within_s:.0f} s", file=sys.stderr)
        return 1
    try:
        set_version(server, version, timeout_s=30.0)
    except OSError as exc:
        print(f"{server}/update_weight_version {version}: {exc}", file=sys.stderr)
        return 1
    print(f"{server} serves {version} ({args.model_path} -> {args.model_path.resolve()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
