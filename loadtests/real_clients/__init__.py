"""Real coding clients (Claude Code, Codex CLI, Continue, aider, llm) run against the gateway.

- :mod:`loadtests.real_clients.versions`: each client's registry, package and pinned version, and
  how "newest" is read from the registry at run time;
- :mod:`loadtests.real_clients.install`: ``install(client, version)`` into
  ``$SWITCHYARD_CACHE/clients/<client>-<version>/``, idempotent and locked;
- :mod:`loadtests.real_clients.drivers`: how to run each one non-interactively in a workspace
  against a gateway URL and an API key (``run_client``).

``python -m loadtests.real_clients --client claude-code --version newest --gateway URL --key K
-- "prompt"`` runs one by hand. What each client sends (its first request, trimmed):
``tests/loadtests/real_client_requests/<client>.json``.
"""

from loadtests.real_clients.drivers import ClientRun, RunResult, run_client
from loadtests.real_clients.install import ClientInstallError, InstalledClient, install
from loadtests.real_clients.versions import (
    CLIENTS,
    ClientSpec,
    resolve_version,
    versions_to_test,
)

__all__ = [
    "CLIENTS",
    "ClientInstallError",
    "ClientRun",
    "ClientSpec",
    "InstalledClient",
    "RunResult",
    "install",
    "resolve_version",
    "run_client",
    "versions_to_test",
]
