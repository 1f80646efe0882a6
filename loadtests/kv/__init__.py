"""KV-cache-aware routing under load, shared by ``make bench-kv``, ``make bench-fleet`` and the
gateway's KV tests.

- :mod:`~loadtests.kv.workload`: an IDE-like trace of prefix-heavy requests, from a seed;
- :mod:`~loadtests.kv.replica_sim`: a fleet of simulated vLLM replicas (prefix cache, FIFO
  server) driven by the router's own selectors;
- :mod:`~loadtests.kv.gateway_replay`: a trace replayed through a gateway process onto vLLM
  replicas, one replica selector at a time.
"""
