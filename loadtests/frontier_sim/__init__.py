"""Frontier simulator: a real HTTP server speaking the OpenAI and Anthropic wire formats.

Shipped as product code so tests, the demo and the gateway benchmark run without API keys. Knobs
(latency, pacing, errors, prices) are in :class:`SimulatorConfig` and can be overridden per
request with ``x-sim-*`` headers; model names containing "error", "slow" or "ratelimit" fail,
slow down or rate-limit. See ``server.py`` for the request pipeline, ``oracle.py`` for how it
answers IDE task prompts registered through ``POST /sim/oracle``, and ``agent_policy.py`` for how
it plays a coding agent through a registered agent task's tool-calling episode.
"""

from loadtests.frontier_sim.answers import RequestView, compose_answer
from loadtests.frontier_sim.config import SimulatorConfig
from loadtests.frontier_sim.oracle import OracleBook
from loadtests.frontier_sim.runner import SimulatorServer, ThreadedSimulator, run_in_thread
from loadtests.frontier_sim.server import STATE, SimulatorStats, build_app

__all__ = [
    "STATE",
    "OracleBook",
    "RequestView",
    "SimulatorConfig",
    "SimulatorServer",
    "SimulatorStats",
    "ThreadedSimulator",
    "build_app",
    "compose_answer",
    "run_in_thread",
]
