"""Postgres storage: the spec's Postgres providers on its migration SQL (psycopg 3, run under trio).

* :func:`create_schema` -- the spec's tables plus our columns and indexes
  (:mod:`storage.postgres.schema`);
* :class:`PostgresSessionProvider` -- one session's message tree, with the
  semantics of the SQLite :class:`storage.messages.MessageStore`
  (:mod:`storage.postgres.messages`);
* :class:`PostgresContextProvider`, :class:`PostgresSearchProvider` --
  context blocks and searchable entries (:mod:`storage.postgres.context`);
* :class:`PostgresStorage` -- a whole database where a Session or a
  SessionManager auto-wires what a SQLite file would hold
  (:mod:`storage.postgres.storage`), with the registry
  :class:`PostgresRegistry` (:mod:`storage.postgres.registry`);
* :func:`open_postgres_storage` -- a host's connection pool with the schema
  ready and every timeout set (:mod:`storage.postgres.pool`).

Connections and how calls run under trio: :mod:`storage.postgres.connection`.
Errors come from :mod:`common.errors`: :class:`~common.errors.InvalidInputError` for a value
Postgres cannot hold, :class:`~common.errors.StorageUnavailableError` (503) when it cannot be
reached, :class:`~common.errors.DatabaseError` when it refuses a statement.
"""

from common.errors import DatabaseError, InvalidInputError, StorageUnavailableError

from .context import PostgresContextProvider, PostgresSearchProvider
from .messages import PostgresSessionProvider
from .pool import describe_dsn, open_postgres_storage
from .registry import PostgresRegistry
from .schema import SCHEMA_VERSION, create_schema
from .storage import PostgresStorage

__all__ = [
    "SCHEMA_VERSION",
    "DatabaseError",
    "InvalidInputError",
    "PostgresContextProvider",
    "PostgresRegistry",
    "PostgresSearchProvider",
    "PostgresSessionProvider",
    "PostgresStorage",
    "StorageUnavailableError",
    "create_schema",
    "describe_dsn",
    "open_postgres_storage",
]
