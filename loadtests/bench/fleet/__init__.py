"""``make bench-fleet``: one fleet of gateways on this machine (:mod:`~loadtests.bench.fleet.run`,
the entry point).

- :mod:`~loadtests.bench.fleet.gateways`: simulated replicas, gateways on a Redis fleet, and
  what the benchmark asks of them over HTTP;
- :mod:`~loadtests.bench.fleet.kv`: KV-aware choice across gateways, on simulated replicas and
  simulated at fleet scale;
- :mod:`~loadtests.bench.fleet.vllm`: the same on two real vLLM replicas, and a drain.
"""
