"""``make bench-kv``: ``python -m loadtests.bench.kv`` runs
:func:`loadtests.bench.kv.run.main`."""

from loadtests.bench.kv.run import main

raise SystemExit(main())
