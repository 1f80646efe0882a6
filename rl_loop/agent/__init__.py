"""Agent episodes in the RL loop: playing a policy in a task environment, gating candidates.

- ``episode``: an agent episode's record (messages, tool calls and results, the final text, the
  workspace's file changes, the verifier's verdict) and the task it played;
- ``environment``: the :class:`~rl_loop.agent.environment.AgentEnvironment` protocol (open a
  task workspace, execute a tool call, run the verifier, report file changes). The loop never
  imports the sandbox: the driver passes an environment in, as ``rl_loop.rewards.Verify`` is
  passed in;
- ``sandbox_environment``: the task library's agent sandbox (``tasks.agent``) as that
  environment;
- ``runner``: the :class:`~rl_loop.agent.runner.AgentPolicy` protocol and :func:`play_episode`;
- ``checkpoint_policy``: a policy backed by a local checkpoint (transformers ``generate`` with
  the checkpoint's chat template, Qwen3 / hermes ``<tool_call>{json}</tool_call>`` parsing);
- ``audits``: the reward-hacking checks, one function per hack, over one episode;
- ``config`` and ``gate``: the agent gate (held-out episode success, tool-call validity, steps
  per success; candidate vs served model vs a frontier reference; the audits).
"""
