"""The registry a SessionManager runs on: :class:`Registry`, on SQLite or on Postgres.

:class:`~actors.manager.SessionManager` awaits exactly the methods of
:class:`Registry`. Two implementations:

* :class:`SqliteRegistry` -- the functions of :mod:`storage.registry` on an
  actor's file, each called synchronously inside an ``async`` method that
  never suspends (no ``await`` inside a SQLite transaction: a write is one
  synchronous call);
* :class:`storage.postgres.PostgresRegistry` -- the same rows in Postgres,
  one transaction per call.

:func:`registry_for` picks the one of a storage. Rows are dicts with the
spec's ``assistant_sessions`` columns (:data:`storage.registry.SESSION_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from storage import SqlStorage, registry
from storage.fts import ParsedQuery
from storage.messages import NewMessage

__all__ = ["Registry", "SqliteRegistry", "registry_for"]

Row = dict[str, Any]


class Registry(Protocol):
    """What a SessionManager asks of its registry (every method ``async``)."""

    async def get_session(self, session_id: str) -> Row | None: ...
    async def session_exists(self, session_id: str) -> bool: ...
    async def list_sessions(self) -> list[Row]: ...
    async def count_sessions(self) -> int: ...
    async def search_messages(self, query: ParsedQuery, limit: int) -> list[Row]: ...
    async def insert_session(
        self,
        session_id: str,
        name: str,
        *,
        parent_session_id: str | None = None,
        model: str | None = None,
        source: str | None = None,
        messages: Sequence[NewMessage] = (),
        end: tuple[str, str] | None = None,
    ) -> Row: ...
    async def touch_session(self, session_id: str) -> bool: ...
    async def rename_session(self, session_id: str, name: str) -> Row | None: ...
    async def end_session(self, session_id: str, reason: str) -> Row | None: ...
    async def add_usage(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float, *,
        check: Callable[[Row], None] | None = None,
    ) -> Row | None: ...
    async def delete_session(self, session_id: str) -> bool: ...


class SqliteRegistry:
    """:mod:`storage.registry` on one actor file, as a :class:`Registry`."""

    __slots__ = ("storage",)

    def __init__(self, storage: SqlStorage) -> None:
        self.storage = storage

    async def get_session(self, session_id: str) -> Row | None:
        return registry.get_session(self.storage, session_id)

    async def session_exists(self, session_id: str) -> bool:
        return registry.session_exists(self.storage, session_id)

    async def list_sessions(self) -> list[Row]:
        return registry.list_sessions(self.storage)

    async def count_sessions(self) -> int:
        return registry.count_sessions(self.storage)

    async def search_messages(self, query: ParsedQuery, limit: int) -> list[Row]:
        return registry.search_messages(self.storage, query, limit)

    async def insert_session(
        self,
        session_id: str,
        name: str,
        *,
        parent_session_id: str | None = None,
        model: str | None = None,
        source: str | None = None,
        messages: Sequence[NewMessage] = (),
        end: tuple[str, str] | None = None,
    ) -> Row:
        """Register ``session_id`` -- after ending ``end = (session id, reason)``, and with
        ``messages`` stored as its first chain -- in one transaction."""
        return registry.insert_session(
            self.storage, session_id, name, parent_session_id=parent_session_id, model=model, source=source,
            messages=messages, end=end,
        )

    async def touch_session(self, session_id: str) -> bool:
        return registry.touch_session(self.storage, session_id)

    async def rename_session(self, session_id: str, name: str) -> Row | None:
        return registry.rename_session(self.storage, session_id, name)

    async def end_session(self, session_id: str, reason: str) -> Row | None:
        return registry.end_session(self.storage, session_id, reason)

    async def add_usage(
        self, session_id: str, input_tokens: int, output_tokens: int, cost: float, *,
        check: Callable[[Row], None] | None = None,
    ) -> Row | None:
        """Add to the counters in one transaction; ``check(row)`` sees the current row first."""
        return registry.add_usage(self.storage, session_id, input_tokens, output_tokens, cost, check=check)

    async def delete_session(self, session_id: str) -> bool:
        return registry.delete_session(self.storage, session_id)


def registry_for(storage: Any) -> Registry:
    """The :class:`Registry` of a :class:`SqlStorage` or a :class:`~storage.postgres.PostgresStorage`."""
    return SqliteRegistry(storage) if isinstance(storage, SqlStorage) else storage.registry
