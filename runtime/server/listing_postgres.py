"""Finding sessions when they live in Postgres (``serve --postgres``): ``GET /v1/sessions`` and ``/{id}``.

:mod:`runtime.server.listing` hands its :meth:`~runtime.server.listing.SessionListing.page`
and :meth:`~runtime.server.listing.SessionListing.describe` here when the
session namespace is bound to :class:`~actors.session_agent_postgres.PostgresSessionAgent`.
The answers come from the database, not from this host's files, so every
host on the database lists every session, a host on an empty data folder
included:

* one ``durable_sessions_catalog`` row per session (:mod:`storage.postgres.catalog`),
  kept by triggers in the same transaction as each write: a listed count is
  never behind a committed write, and a listing reads one indexed row per
  entry (never the messages);
* the same shape as on a single host (:data:`runtime.api.SESSION_SUMMARY`):
  ``id`` (the name the session is addressed by), ``messages`` (every
  branch), ``compactions``, ``compactedThrough``, ``createdAt``,
  ``updatedAt`` (the last write a caller made; reads, the cached prompt
  frozen by a read, and waking on a new host do not move it), ``state``
  (always ``ok``: there is no file to be damaged), ``problem`` (``null``),
  ``active`` (awake on *this* host);
* the same order and paging: newest ``updatedAt`` first, ties by actor id,
  an opaque keyset ``cursor`` (the listing's own format), ``prefix`` on ids.

Sessions reached only by their hex id (never named) are not listed, as on a
single host. A Postgres that is down or stalled answers 503 with
``Retry-After`` (``StorageUnavailableError``), never a partial page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.errors import SessionNotFoundError
from runtime.api import LIST_DEFAULT_LIMIT

if TYPE_CHECKING:
    from runtime.server.app import SessionsServer
    from storage.postgres.catalog import CatalogRow

__all__ = ["PostgresListing"]


class PostgresListing:
    """The listing of a server whose sessions are in Postgres (see the module docstring)."""

    def __init__(self, server: SessionsServer) -> None:
        self.server = server

    @property
    def storage(self) -> Any:
        """The host's :class:`~storage.postgres.PostgresStorage` (the session namespace's env)."""
        return self.server.namespace.env.storage

    async def page(self, limit: int = LIST_DEFAULT_LIMIT, cursor: str | None = None,
                   prefix: str | None = None) -> dict[str, Any]:
        """``{"sessions": [...], "cursor": str | None}``: the page of sessions after ``cursor``.

        Raises:
            InvalidInputError: (``field="cursor"``) a cursor this listing did not make.
            StorageUnavailableError: Postgres cannot be reached or does not answer in time (503).
        """
        from runtime.server.listing import decode_cursor, encode_cursor

        below = decode_cursor(cursor)
        rows = await self.storage.catalog_page(limit + 1, below=below, prefix=prefix)
        shown = rows[:limit]
        entries = [self._entry(row, row.name) for row in shown if row.name is not None]
        more = len(rows) > limit
        return {"sessions": entries, "cursor": encode_cursor(shown[-1].key) if more and shown else None}

    async def describe(self, session_id: str) -> dict[str, Any]:
        """The :data:`~runtime.api.SESSION_SUMMARY` of one session, under ``session_id``.

        Raises:
            SessionNotFoundError: the database holds no session with this id.
            StorageUnavailableError: Postgres cannot be reached or does not answer in time (503).
        """
        actor = self.server.actor_id(session_id)
        row = await self.storage.catalog_entry(actor.hex)
        if row is None:
            raise SessionNotFoundError(session_id)
        return self._entry(row, session_id)

    def _entry(self, row: CatalogRow, name: str) -> dict[str, Any]:
        from runtime.server.listing import iso_ms

        namespace = self.server.namespace
        return {
            "id": name, "messages": row.messages, "compactions": row.compactions,
            "compactedThrough": row.compacted_through, "createdAt": iso_ms(row.created_ms),
            "updatedAt": iso_ms(row.updated_ms), "state": "ok", "problem": None,
            "active": self.server.host.is_active(namespace, row.session_id),
        }
