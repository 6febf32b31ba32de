"""A Postgres database as the home of Sessions and a SessionManager: :class:`PostgresStorage`.

The spec's Postgres path hands a Session one provider per concern
(``Session.create(PostgresSessionProvider(conn, session_id))``, each block
with its own provider) and skips all auto-wiring. :class:`PostgresStorage`
is the other way in, our addition: the Postgres counterpart of an actor's
:class:`~storage.SqlStorage`. Given to ``Session`` / ``Session.create`` /
``SessionManager.create`` where a ``SqlStorage`` would go, it wires
everything the SQLite file would hold into the same Postgres tables:

==============================  ==========================================  ========================================
what                            SQLite file                                 here
==============================  ==========================================  ========================================
a session's messages            ``MessageStore(storage, sid)``              :meth:`PostgresStorage.messages`
a block without a provider      ``AgentContextProvider`` row ``<label>_<sid>``  :meth:`PostgresStorage.block` (same key)
the cached prompt               row ``_system_prompt[_<sid>]``              :meth:`PostgresStorage.block` (same key)
searchable entries of a label   ``AgentSearchProvider``                     :meth:`PostgresStorage.search`
loaded skills, active leaf      ``assistant_config`` rows                   the same rows (per session)
the SessionManager registry     :mod:`storage.registry`                     :attr:`PostgresStorage.registry`
a listing's row per session     the host catalog (``_catalog.sqlite3``)     :meth:`PostgresStorage.catalog_page`
==============================  ==========================================  ========================================

One ``PostgresStorage`` is cheap (it holds the connection's runner); make
one per pool and share it. ``call_timeout_s`` bounds how long any call
waits (see :func:`storage.postgres.connection.runner_for`); a host sets it
so that a stalled database answers 503, never a hang.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ..tree.context import delete_blocks
from . import catalog
from .catalog import CatalogRow
from .connection import Operation, Query, Runner, on_postgres, runner_for
from .context import POSTGRES_CONTEXT, PostgresContextProvider, PostgresSearchProvider
from .embeddings import PostgresEmbeddingProvider, PostgresEntryVectors, PostgresManagerVectors, PostgresVectorRows
from .messages import PostgresSessionProvider
from .registry import PostgresRegistry
from .values import MAX_VALUE_BYTES, check_text


#: Everything of one session (``%(s)s``) in one statement: messages, compactions, ``assistant_config`` rows
#: (name, active leaf, metadata, loaded skills), the block rows and search entries filed under
#: ``<label>_<session id>`` (the cached prompt ``_system_prompt_<session id>`` too) and the catalog row.
#: The vectors and pending markers of the messages and entries go with them (``ON DELETE CASCADE``).
#: The catalog's triggers only update existing rows, so none comes back. Returns the catalog row's id.
_ERASE_SESSION = """
WITH messages AS (DELETE FROM assistant_messages WHERE session_id = %(s)s),
compactions AS (DELETE FROM assistant_compactions WHERE session_id = %(s)s),
config AS (DELETE FROM assistant_config WHERE session_id = %(s)s),
blocks AS (DELETE FROM cf_agents_context_blocks WHERE length(label) > %(n)s AND right(label, %(n)s) = %(suffix)s),
entries AS (DELETE FROM cf_agents_search_entries WHERE length(label) > %(n)s AND right(label, %(n)s) = %(suffix)s)
DELETE FROM durable_sessions_catalog WHERE session_id = %(s)s RETURNING session_id
"""


def _erase_session(session_id: str) -> Operation[bool]:
    suffix = "_" + session_id
    rows = yield Query(_ERASE_SESSION, {"s": session_id, "n": len(suffix), "suffix": suffix})
    return bool(rows)


class PostgresStorage:
    """Sessions, blocks, search entries and the registry in one Postgres database.

    Args:
        conn: a ``psycopg.Connection``, a ``psycopg_pool.ConnectionPool``
            (recommended), or an object with ``execute(query, args)`` (see
            :mod:`storage.postgres.connection`). The schema must exist
            (:func:`storage.postgres.create_schema`).
        call_timeout_s: the longest one call waits, in seconds, for a
            psycopg connection or pool (``None``: no limit).
        max_value_bytes: most UTF-8 bytes of one stored message or value.

    Raises:
        TypeError: ``conn`` cannot run statements (see ``runner_for``).
    """

    def __init__(
        self, conn: Any, *, call_timeout_s: float | None = None, max_value_bytes: int = MAX_VALUE_BYTES
    ) -> None:
        self.conn = conn
        self.max_value_bytes = max_value_bytes
        self.runner: Runner = runner_for(conn, deadline_s=call_timeout_s)
        self.registry = PostgresRegistry(self)

    def __repr__(self) -> str:
        return f"PostgresStorage({type(self.conn).__name__})"

    def for_owner(self, owner: str) -> PostgresStorage:
        """This storage (same connection, runner and limits) with :attr:`registry` scoped to the rows of
        ``owner`` (e.g. a manager actor's hex id): a SessionManager on it sees only its own sessions.

        Raises:
            ValueError: ``owner`` is not 1-128 characters of ``[0-9A-Za-z_.:-]``.
        """
        scoped = copy.copy(self)
        scoped.registry = PostgresRegistry(self, owner=owner)
        return scoped

    def messages(self, session_id: str = "") -> PostgresSessionProvider:
        """The message store of ``session_id`` (a new provider object; all of them see the same rows)."""
        return PostgresSessionProvider(self, session_id, max_value_bytes=self.max_value_bytes)

    def embedding_messages(self, session_id: str = "") -> PostgresEmbeddingProvider:
        """:meth:`messages` that also marks each message with text to be embedded, in its write's
        transaction (semantic search: :mod:`storage.postgres.embeddings`)."""
        return PostgresEmbeddingProvider(self, session_id, max_value_bytes=self.max_value_bytes)

    def vectors(self, session_id: str = "") -> PostgresVectorRows:
        """The message vectors and pending markers of ``session_id`` (:mod:`storage.postgres.embeddings`)."""
        return PostgresVectorRows(self, session_id)

    def manager_vectors(self) -> PostgresManagerVectors:
        """The message vectors of the sessions :attr:`registry` holds (its owner's, when scoped)."""
        return PostgresManagerVectors(self, self.registry.owner)

    def entry_vectors(self) -> PostgresEntryVectors:
        """The vectors of searchable blocks' entries (:mod:`storage.postgres.embeddings`)."""
        return PostgresEntryVectors(self)

    def block(self, key: str) -> PostgresContextProvider:
        """A writable block stored as the ``cf_agents_context_blocks`` row ``key``."""
        return PostgresContextProvider(self, check_text(key, "key"))

    def search(self, key: str | None = None) -> PostgresSearchProvider:
        """A searchable block whose entries are filed under its label (or under ``key`` when given)."""
        return PostgresSearchProvider(self, key=key)

    async def delete_blocks(self, labels: Sequence[str]) -> int:
        """Delete the block rows named in ``labels``, in one transaction; returns how many existed."""
        labels = [check_text(label, "labels") for label in labels]
        op = delete_blocks(POSTGRES_CONTEXT, labels)
        return await self.runner.run(on_postgres(op), write=True) if labels else 0

    async def erase_session(self, session_id: str) -> bool:
        """Delete every row of session ``session_id`` in one transaction (see ``_ERASE_SESSION``): its
        messages, compactions, config rows, catalog row, and the block rows and search entries filed under
        ``<label>_<session_id>``. Returns ``True`` when it had a catalog row (it was written or named).

        Deleted rows stay in Postgres' files until (auto)vacuum reclaims them (docs/postgres.md).

        Raises:
            InvalidInputError: ``session_id`` is not text Postgres can hold.
            StorageUnavailableError: Postgres cannot be reached or does not answer in time (nothing deleted).
        """
        key = check_text(session_id, "session_id")
        return await self.runner.run(_erase_session(key), write=True)

    # -- the catalog (storage.postgres.catalog) -------------------------------------------------

    async def written(self, session_id: str) -> bool:
        """Whether session ``session_id`` was ever written or named here (one primary-key read).

        Raises:
            StorageUnavailableError: Postgres cannot be reached or does not answer in time.
        """
        key = check_text(session_id, "session_id")
        return await self.runner.run(catalog.written(key), write=False)

    async def catalog_entry(self, session_id: str) -> CatalogRow | None:
        """The catalog row of ``session_id``, or ``None`` (one primary-key read)."""
        key = check_text(session_id, "session_id")
        return await self.runner.run(catalog.entry(key), write=False)

    async def catalog_page(
        self, limit: int, below: tuple[int, str] | None = None, prefix: str | None = None
    ) -> list[CatalogRow]:
        """Up to ``limit`` named sessions, newest ``updated_ms`` first, after the keyset key ``below``
        (``(updated_ms, session_id)``), names starting with ``prefix`` (see :func:`storage.postgres.catalog.page`).

        Raises:
            InvalidInputError: ``prefix`` is not text Postgres can hold.
            StorageUnavailableError: Postgres cannot be reached or does not answer in time.
        """
        if prefix is not None:
            prefix = check_text(prefix, "prefix")
        return await self.runner.run(catalog.page(limit, below, prefix), write=False)
