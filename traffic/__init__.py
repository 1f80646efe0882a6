"""The traffic record: what the gateway writes and the RL loop reads, one typed row between them.

- :mod:`traffic.store`: records (:class:`~traffic.store.InferenceRecord` and its feedback,
  shadow answers, versions, API keys), schema and migrations, the SQLite and PostgreSQL backends,
  the async record writer with its spool, and the read API (``iter_inferences`` with an
  :class:`~traffic.store.InferenceFilter` whose time window is answered from the UUIDv7 ids);
- :mod:`traffic.export`: datasets (SFT, preference pairs, RL prompts) built from the store's
  rows, in memory for the RL loop or as JSONL / Parquet files with a manifest;
- :mod:`traffic.scrub`: secrets and PII replaced by stable placeholders, with the findings to
  restore them; every exported text goes through it (docs/secrets.md).

It imports nothing else of the project (``tests/test_architecture.py``): the gateway and the RL
loop import it, and whatever only the gateway can do (re-translating records written before
their canonical fields) is handed in by the caller.
"""
