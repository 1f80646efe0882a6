"""Make `vllm_replica` available here even before the root conftest registers its plugin.

Importing the fixture into this module would define it a second time (and could start a second
vLLM when other packages use the plugin's copy), so the plugin is registered once instead.
"""

import pytest

_PLUGIN = "tests.fixtures.vllm_fixture"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_PLUGIN):
        config.pluginmanager.import_plugin(_PLUGIN)
