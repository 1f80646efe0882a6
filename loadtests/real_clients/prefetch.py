"""Install every real client the tests run, all at once, ahead of them.

    python -m loadtests.real_clients.prefetch [--cache-dir DIR]

Each (client, version) of ``tests/loadtests/test_real_clients.py`` (newest and pinned; the
pinned one only where it is not also the newest) is installed in a thread of its own: the
installs wait on registries and downloads, not on the CPU, so together they take about as long
as the longest one (aider, minutes on a cold cache). The test session starts this in the
background when it collected those tests (``tests/conftest.py``); an install it has not finished
when a test needs it is waited for under the install's own lock (``install._once``), and one
that failed is tried again by the test, which reports the error. Prints one line per install.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from loadtests.real_clients.install import ClientInstallError, install
from loadtests.real_clients.versions import CLIENTS, RegistryError, versions_to_test


def _one(client: str, cache_dir: Path | None) -> str:
    started = time.monotonic()
    try:
        versions = list(versions_to_test(client).values())
        for exact in versions:
            install(client, exact, cache_dir)
    except (ClientInstallError, RegistryError) as exc:
        return f"{client}: failed after {time.monotonic() - started:.0f}s: {exc}"
    return f"{client} {', '.join(versions)}: ready in {time.monotonic() - started:.0f}s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache-dir", type=Path, default=None, help="instead of SWITCHYARD_CACHE")
    args = parser.parse_args(argv)
    clients = sorted(CLIENTS)
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        for line in pool.map(lambda c: _one(c, args.cache_dir), clients):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
