"""The task library: tasks with verifiable outcomes that training, benchmarks and the simulator
share (floor 1: imports nothing of ours).

- ``ide``: the IDE task families (one ``fam_*`` module per group of families), their client
  profiles, the train/held-out split of seeds and contents, the fixed traffic mix and the
  sandboxed verifiers (``tasks/ide/README.md``);
- ``agent``: the agent tasks on generated repositories, the tools real clients declare, the
  sandbox workspace where tool calls run and the verifier of an episode (``docs/agents.md``).

Who plays them: the simulated clients (``loadtests.ide_client``, ``loadtests.agent``) send them
to a gateway, the frontier simulator's oracle answers them, the RL loop trains and gates on them
(``rl_loop.agent.sandbox_environment`` adapts the agent sandbox to its environment protocol).
"""
