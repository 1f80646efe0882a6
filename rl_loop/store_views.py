"""A read view of the traffic store whose rows pass through a function: the loop reads the
store through views (rows with the client-side labels joined: ``rl_loop.labels``; rows of agent
episodes left out of the chat loop: ``rl_loop.agent_round``). Everything but
``iter_inferences`` is the store's own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from traffic.store import InferenceFilter, InferenceRow, StoreBackend
from traffic.store.config import DEFAULT_READ_BATCH_SIZE

#: A row as the view shows it, or None to leave it out.
RowMap = Callable[[InferenceRow], InferenceRow | None]


class _MappedStore:
    def __init__(self, store: StoreBackend, row_map: RowMap) -> None:
        self._store = store
        self._map = row_map

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def base_store(self) -> StoreBackend:
        """The store under every view: what reads of other than inference rows (the console's
        SQL, a checkpoint's taint) go to (``traffic.store.console_queries.sql_store``)."""
        inner: StoreBackend = getattr(self._store, "base_store", self._store)
        return inner

    async def iter_inferences(
        self,
        filters: InferenceFilter | None = None,
        batch_size: int = DEFAULT_READ_BATCH_SIZE,
        *,
        with_shadows: bool = False,
    ) -> AsyncIterator[InferenceRow]:
        rows = self._store.iter_inferences(filters, batch_size, with_shadows=with_shadows)
        async for row in rows:
            shown = self._map(row)
            if shown is not None:
                yield shown


def mapped_store(store: StoreBackend, row_map: RowMap) -> StoreBackend:
    """``store`` whose ``iter_inferences`` yields ``row_map(row)`` for each row (None: left
    out); ``row_map`` runs at each row, so what it reads may change between reads."""
    return cast(StoreBackend, _MappedStore(store, row_map))
