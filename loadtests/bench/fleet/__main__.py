"""``make bench-fleet``: ``python -m loadtests.bench.fleet`` runs
:func:`loadtests.bench.fleet.run.main`."""

from loadtests.bench.fleet.run import main

raise SystemExit(main())
