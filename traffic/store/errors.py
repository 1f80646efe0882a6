"""Errors raised by the traffic store.

StoreError                 anything the store refuses or cannot do
 +-- StoreUnavailable      the database cannot be reached now (refused connection, server gone,
 |                         SQLite file locked or unwritable); retrying later may succeed, and the
 |                         record writer spools the batch and replays it when the database returns
 +-- StoreDataError        the database refused the data or the query; retrying will not help
      +-- StoreConflict    a unique key already exists (an API key's id or hash)

Backends translate driver exceptions (``sqlite3.Error``, ``psycopg.Error``) into these, so callers
never import a driver to handle a failure.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error the traffic store raises."""


class StoreUnavailable(StoreError):
    """The database cannot be reached now; the same call may succeed later."""


class StoreDataError(StoreError):
    """The database refused the data or the statement; the same call will fail again."""


class StoreConflict(StoreDataError):
    """A row with the same unique key already exists."""
