"""``make bench-gateway``: the gateway's overhead against the simulator and the LiteLLM proxy
(:mod:`~loadtests.bench.gateway.run` is the entry point).

- :mod:`~loadtests.bench.gateway.settings`: what one run measures (full or quick), its systems
  and modes, each default once;
- :mod:`~loadtests.bench.gateway.systems`: the servers' configs, their timed start-up, memory
  after load;
- :mod:`~loadtests.bench.gateway.cells`: what each cell asks of the load generator, and the cell
  loop;
- :mod:`~loadtests.bench.gateway.loadgen`: the load generator (OpenAI and Anthropic wire
  formats), run as its own process per cell;
- :mod:`~loadtests.bench.gateway.litellm_proxy`: the LiteLLM proxy's own venv and config;
- :mod:`~loadtests.bench.gateway.figures`: the headline figures and their targets;
- :mod:`~loadtests.bench.gateway.report`: the cells as rows, the tables, CSV/JSON;
- :mod:`~loadtests.bench.gateway.chart`: ``chart.png``;
- :mod:`~loadtests.bench.gateway.profile`: py-spy on a gateway under load, and its hot spots.

Shared with the other benchmarks: :mod:`loadtests.bench.servers` (servers as subprocesses) and
:mod:`loadtests.bench.store` (records/s of the traffic store's writer).
"""
