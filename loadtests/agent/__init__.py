"""The agent workload: multi-turn tool-calling episodes, as IDE agents send them.

- ``repos``: small Python repositories generated from a seed (helpers, a report module, tests);
- ``tasks``: agent tasks of mixed difficulty on them, with reference and mistaken solutions;
- ``tools``: the tool set real clients declare (read_file, list_dir, search, edit or
  apply_patch, run_tests), per client flavour;
- ``sandbox``: one workspace per episode where tool calls run, with time, memory, output and
  file limits, confined to the repository and without network;
- ``verifier``: the verdict on an episode (tests pass, or the answer is right);
- ``wire`` and ``client``: the simulated agent client on Chat Completions and the Responses API;
- ``run``: ``python -m loadtests.agent.run --gateway URL --episodes N --seed S``.

The frontier simulator plays the agent (``loadtests/frontier_sim/agent_policy.py``). See
``docs/agents.md``. Modules are imported where used: the simulator imports ``tasks`` only.
"""
