"""Pieces of the gateway benchmark (:mod:`loadtests.bench_gateway` is the entry point).

- :mod:`~loadtests.bench.settings`: what one run measures (full or quick), its systems and
  modes, each default once;
- :mod:`~loadtests.bench.systems`: the servers' configs, their timed start-up, memory after load;
- :mod:`~loadtests.bench.cells`: what each cell asks of the load generator, and the cell loop;
- :mod:`~loadtests.bench.loadgen`: the load generator (OpenAI and Anthropic wire formats), run
  as its own process per cell;
- :mod:`~loadtests.bench.servers`: servers as subprocesses (free ports, readiness, teardown);
- :mod:`~loadtests.bench.litellm_proxy`: the LiteLLM proxy's own venv and config;
- :mod:`~loadtests.bench.store_throughput`: records/s of the traffic store's writer;
- :mod:`~loadtests.bench.figures`: the headline figures and their targets;
- :mod:`~loadtests.bench.report`: the cells as rows, the tables, CSV/JSON;
- :mod:`~loadtests.bench.chart`: ``chart.png``;
- :mod:`~loadtests.bench.profile`: py-spy on a gateway under load, and its hot spots.
"""
