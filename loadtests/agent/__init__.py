"""The simulated agent client: multi-turn tool-calling episodes sent to a gateway over HTTP.

- ``wire`` and ``client``: the agent client on Chat Completions and the Responses API, playing
  the task library's agent tasks (:mod:`tasks.agent`) in its sandbox;
- ``run``: ``python -m loadtests.agent.run --gateway URL --episodes N --seed S``.

The frontier simulator plays the agent (``loadtests/frontier_sim/agent_policy.py``). See
``docs/agents.md``.
"""
