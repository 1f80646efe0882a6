"""``make bench-routing``: ``python -m loadtests.bench.routing`` runs
:func:`loadtests.bench.routing.run.main`."""

from loadtests.bench.routing.run import main

raise SystemExit(main())
