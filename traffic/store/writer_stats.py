"""The record writer's counters (:class:`WriterStats`, a snapshot for metrics) and the shape of
what the database refused (:data:`Rejected`); shared by :mod:`traffic.store.writer` and
:mod:`traffic.store.writer_replay`."""

from __future__ import annotations

import dataclasses

from traffic.store.spool import SpoolRecord

Rejected = list[tuple[SpoolRecord, str]]  # records the database refused, with the reason


@dataclasses.dataclass(slots=True)
class WriterStats:
    queued_total: int = 0  # records accepted into the in-memory queue
    written_total: int = 0  # stored by the drain task
    spooled_total: int = 0  # appended to the spool (queue full or database down)
    replayed_total: int = 0  # stored from the spool
    queue_full_total: int = 0  # submits that found the queue full (these went to the spool)
    write_errors_total: int = 0  # failed database operations, replays and pings included
    rejected_total: int = 0  # dead-lettered: refused by the database, or not encodable
    spool_errors_total: int = 0  # failed spool writes (retried)
    lost_total: int = 0  # neither database nor disk would take them at close
    faults_total: int = 0  # unexpected exceptions in the writer's tasks (bugs), each logged
    restarts_total: int = 0  # tasks restarted after a fault
    last_error: str | None = None
    queue_depth: int = 0
    overflow_depth: int = 0  # records waiting in memory to be spooled
    db_available: bool = True
    tasks_alive: int = 0  # background tasks running now (of 3); not one dead or backing off
    healthy: int = 0  # 1 or 0: RecordWriter.healthy, as a number for /metrics
