"""A seeded console on a real gateway, one for the console's tests (see ``site.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.gateway.console.site import Site, admin_token, start_site


@pytest.fixture(scope="package")
def site(frontier_sim: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with admin_token():
        running = start_site(frontier_sim.base_url, tmp_path_factory.mktemp("console"))
        try:
            yield running
        finally:
            running.gw.stop()
