"""``make bench-gateway``: ``python -m loadtests.bench.gateway`` runs
:func:`loadtests.bench.gateway.run.main`."""

from loadtests.bench.gateway.run import main

main()
