"""Agent tasks: multi-turn tool-calling episodes on generated repositories, as IDE agents play them.

- ``repos``: small Python repositories generated from a seed (helpers, a report module, tests);
- ``tasks``: agent tasks of mixed difficulty on them, with reference and mistaken solutions;
- ``tools``: the tool set real clients declare (read_file, list_dir, search, edit or
  apply_patch, run_tests), per client flavour;
- ``sandbox``: one workspace per episode where tool calls run, with time, memory, output and
  file limits, confined to the repository and without network;
- ``verifier``: the verdict on an episode (tests pass, or the answer is right).

Seeds split as the IDE families' do (:func:`tasks.ide.task.split_of`). See ``docs/agents.md``.
"""
