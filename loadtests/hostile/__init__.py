"""Hostile input for every door: a seeded corpus, and firing it at a gateway.

- :mod:`~loadtests.hostile.case`: one hostile request's shape and the valid bodies cases are made
  from;
- :mod:`~loadtests.hostile.corpus`: the seeded corpus (generic families, by weight);
- :mod:`~loadtests.hostile.doors`: each wire format's quirks, feedback and the admin API;
- :mod:`~loadtests.hostile.landmarks`: one case per hostile input the issue names;
- :mod:`~loadtests.hostile.fire`: fire a corpus at a running gateway, watch it, judge answers.

``make fuzz`` runs it in process (``tests/gateway/test_hostile_input.py``); ``make bench-hostile``
against a gateway process (:mod:`loadtests.bench.hostile`).
"""
