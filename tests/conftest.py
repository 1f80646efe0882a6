"""Shared fixtures: real servers on loopback, each started once per session."""

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

pytest_plugins = [
    "tests.fixtures.simulator_fixture",
    "tests.fixtures.vllm_fixture",
    "tests.fixtures.gateway_fixture",
    "tests.fixtures.postgres_fixture",
]
