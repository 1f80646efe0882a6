"""``make bench-kv``: KV-cache-aware replica choice (:mod:`~loadtests.bench.kv.run`, the entry
point; :mod:`~loadtests.bench.kv.report`, its summary and targets). The trace, the simulated
fleet and the replay through a gateway are :mod:`loadtests.kv`'s, shared with ``bench-fleet``.
"""
