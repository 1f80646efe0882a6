"""Pieces of the gateway benchmark (:mod:`loadtests.bench_gateway` is the entry point).

- :mod:`~loadtests.bench.settings`: what one run measures (full or quick), each default once;
- :mod:`~loadtests.bench.loadgen`: the load generator, run as its own process per cell;
- :mod:`~loadtests.bench.servers`: servers as subprocesses (free ports, readiness, teardown);
- :mod:`~loadtests.bench.litellm_proxy`: the LiteLLM proxy's own venv and config;
- :mod:`~loadtests.bench.store_throughput`: records/s of the traffic store's writer;
- :mod:`~loadtests.bench.report`: table, CSV/JSON, chart and the summary line;
- :mod:`~loadtests.bench.profile`: py-spy on the gateway under load, and its hot spots.
"""
