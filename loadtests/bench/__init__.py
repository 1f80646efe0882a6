"""The benchmark room: one module or package per ``make bench-*`` target, named after it.

=====================  =====================================  ==================================
make target            module (``python -m ...``)             measures
=====================  =====================================  ==================================
``bench-gateway``      ``loadtests.bench.gateway``            overhead vs the simulator, LiteLLM
``bench-kv``           ``loadtests.bench.kv``                 KV-cache-aware replica choice
``bench-fleet``        ``loadtests.bench.fleet``              workers, propagation, KV per fleet
``bench-routing``      ``loadtests.bench.routing``            learned routing vs baselines
``bench-loop-lag``     ``loadtests.bench.loop_lag``           event-loop lag under a big request
``bench-hostile``      ``loadtests.bench.hostile``            hostile corpus against a gateway
``bench-serving``      ``loadtests.bench.serving``            tokens/s, TTFT, hot swap, fp8 drift
``bench-train``        ``loadtests.bench.train``              the training stacks, 1 vs 2 procs
``bench-console``      ``loadtests.bench.console``            console pages on 1M inferences
=====================  =====================================  ==================================

Shared by them: :mod:`~loadtests.bench.servers` (servers as subprocesses, certain teardown),
:mod:`~loadtests.bench.sim_gateway` (a gateway config on the frontier simulator) and
:mod:`~loadtests.bench.store` (the traffic store's write throughput, part of ``bench-gateway``).

A benchmark is an orchestrator, like ``scripts/``: it may import any package of ours (the
production code it measures, started in process or as children); ``tests/test_architecture.py``
states that as a rule of this room. Measured figures live in ``docs/``, not in the modules.
"""
