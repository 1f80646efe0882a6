"""``make bench-routing``: the learned router against its baselines on a flywheel run's record
(:mod:`~loadtests.bench.routing.run`, the entry point).

- :mod:`~loadtests.bench.routing.items`: what is read of the run, the fit outcomes and the
  evaluation items;
- :mod:`~loadtests.bench.routing.report`: policies, cost/quality curves, APGR, targets, the PNG;
- :mod:`~loadtests.bench.routing.scorer`: the request scorer's request-path cost and its model
  comparison.
"""
